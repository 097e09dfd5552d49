<?php
/**
 * Plugin Name: Cloud platform
 * Description: What the hosting platform does inside every site: single-use autologin links, media
 *              URLs through the CDN, and mail through the platform's relay with a log. Platform-owned
 *              (a must-use plugin outside the site's wp-content); the site cannot change it.
 * Version: 1.0.0
 *
 * Constants it reads (defined by the platform's wp-config.php from config/site.json):
 * CLOUD_SMTP_HOST / CLOUD_SMTP_PORT (absent: the host has no relay), CLOUD_PRIVATE_DIR (mail.jsonl).
 * Options it reads: `cloud_autologin` ({sha256, expires}, armed by the platform's helper),
 * `cloud_cdn_url` (string, unset when the CDN is off).
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

/* ---------------------------------------------------------------------------------------------
 * Autologin: `?cloud_autologin=<token>` on any URL. The option holds the token's SHA-256 and its
 * expiry; the first request whose DELETE of that exact row succeeds logs in, every other fails.
 */

/** Answers 403 with a short text and stops (no cookie is set). */
function cloud_platform_autologin_refuse() {
	nocache_headers();
	status_header( 403 );
	header( 'Content-Type: text/plain; charset=utf-8' );
	echo "This login link is invalid, expired or already used.\n";
	exit;
}

function cloud_platform_autologin() {
	if ( ! isset( $_GET['cloud_autologin'] ) || ( defined( 'WP_CLI' ) && WP_CLI ) || PHP_SAPI === 'cli' ) {
		return;
	}
	global $wpdb;
	$token = $_GET['cloud_autologin'];
	if ( ! is_string( $token ) ) {
		cloud_platform_autologin_refuse();
	}
	$token = wp_unslash( $token );
	if ( '' === $token || strlen( $token ) > 256 ) {
		cloud_platform_autologin_refuse();
	}
	// Straight from the table: never an object cache's copy.
	$raw = $wpdb->get_var( $wpdb->prepare( "SELECT option_value FROM {$wpdb->options} WHERE option_name = %s", 'cloud_autologin' ) );
	if ( null === $raw ) {
		cloud_platform_autologin_refuse();
	}
	$armed = maybe_unserialize( $raw );
	if ( ! is_array( $armed ) || ! isset( $armed['sha256'], $armed['expires'] ) || ! is_string( $armed['sha256'] ) ) {
		cloud_platform_autologin_refuse();
	}
	if ( ! hash_equals( strtolower( $armed['sha256'] ), hash( 'sha256', $token ) ) ) {
		cloud_platform_autologin_refuse();
	}
	// Single use: whoever deletes the row wins; a concurrent second use deletes nothing.
	$deleted = $wpdb->delete(
		$wpdb->options,
		array(
			'option_name'  => 'cloud_autologin',
			'option_value' => $raw,
		)
	);
	wp_cache_delete( 'cloud_autologin', 'options' );
	wp_cache_delete( 'alloptions', 'options' );
	if ( 1 !== $deleted || (int) $armed['expires'] < time() ) {
		cloud_platform_autologin_refuse();
	}
	$admins = get_users(
		array(
			'role'    => 'administrator',
			'orderby' => 'ID',
			'order'   => 'ASC',
			'number'  => 1,
			'fields'  => 'ID',
		)
	);
	if ( empty( $admins ) ) {
		cloud_platform_autologin_refuse();
	}
	$user_id = (int) $admins[0];
	wp_set_current_user( $user_id );
	wp_set_auth_cookie( $user_id, false, is_ssl() );
	nocache_headers();
	wp_safe_redirect( admin_url() );
	exit;
}
// After pluggable functions (wp_set_auth_cookie) are loaded, before anything renders.
add_action( 'plugins_loaded', 'cloud_platform_autologin', -1000 );

/* ---------------------------------------------------------------------------------------------
 * CDN: with `cloud_cdn_url` set, front-end pages (template_redirect: not admin, REST, AJAX or cron)
 * have `<home>/wp-content/uploads/` rewritten to `<cdn_url>/wp-content/uploads/`.
 */

function cloud_platform_cdn_rewrite( $html ) {
	$cdn = get_option( 'cloud_cdn_url' );
	if ( ! is_string( $cdn ) || '' === $cdn || ! is_string( $html ) || '' === $html ) {
		return $html;
	}
	$cdn  = untrailingslashit( $cdn );
	$from = array();
	$to   = array();
	foreach ( array_unique( array( untrailingslashit( home_url() ), untrailingslashit( site_url() ) ) ) as $base ) {
		$from[] = $base . '/wp-content/uploads/';
		$to[]   = $cdn . '/wp-content/uploads/';
		// The same URL as JSON writes it inside inline scripts.
		$from[] = str_replace( '/', '\\/', $base . '/wp-content/uploads/' );
		$to[]   = str_replace( '/', '\\/', $cdn . '/wp-content/uploads/' );
	}
	return str_replace( $from, $to, $html );
}

function cloud_platform_cdn_start() {
	if ( is_admin() || wp_doing_ajax() || wp_doing_cron() || ( defined( 'REST_REQUEST' ) && REST_REQUEST ) ) {
		return;
	}
	$cdn = get_option( 'cloud_cdn_url' );
	if ( is_string( $cdn ) && '' !== $cdn ) {
		ob_start( 'cloud_platform_cdn_rewrite' );
	}
}
add_action( 'template_redirect', 'cloud_platform_cdn_start', -1000 );

/* ---------------------------------------------------------------------------------------------
 * Mail: through the platform's relay (no authentication, no TLS), one JSON line per message in
 * CLOUD_PRIVATE_DIR/mail.jsonl: {to, subject, method, sent_at, sent, error?}, never the body.
 */

function cloud_platform_mail_log( $mail, $sent, $error = null ) {
	if ( ! defined( 'CLOUD_PRIVATE_DIR' ) ) {
		return;
	}
	$to    = isset( $mail['to'] ) ? $mail['to'] : array();
	$entry = array(
		'to'      => implode( ', ', array_map( 'strval', (array) $to ) ),
		'subject' => isset( $mail['subject'] ) ? (string) $mail['subject'] : '',
		'method'  => 'smtp',
		'sent_at' => gmdate( 'Y-m-d\TH:i:s\Z' ),
		'sent'    => (bool) $sent,
	);
	if ( null !== $error ) {
		$entry['error'] = (string) $error;
	}
	$line = wp_json_encode( $entry, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE );
	if ( false !== $line ) {
		// Appending is best effort: a full disk must not turn a sent mail into an error page.
		@file_put_contents( CLOUD_PRIVATE_DIR . '/mail.jsonl', $line . "\n", FILE_APPEND | LOCK_EX );
	}
}

/** Without a relay, wp_mail fails at once with the reason instead of trying the local sendmail. */
function cloud_platform_mail_pre( $return, $atts ) {
	if ( null !== $return || defined( 'CLOUD_SMTP_HOST' ) ) {
		return $return;
	}
	$data = array(
		'to'      => isset( $atts['to'] ) ? $atts['to'] : array(),
		'subject' => isset( $atts['subject'] ) ? $atts['subject'] : '',
	);
	do_action( 'wp_mail_failed', new WP_Error( 'wp_mail_failed', 'No mail relay is configured for this host: mail cannot be sent.', $data ) );
	return false;
}
add_filter( 'pre_wp_mail', 'cloud_platform_mail_pre', PHP_INT_MAX, 2 );

function cloud_platform_phpmailer_init( $phpmailer ) {
	if ( ! defined( 'CLOUD_SMTP_HOST' ) ) {
		return;
	}
	$phpmailer->isSMTP();
	$phpmailer->Host        = CLOUD_SMTP_HOST;
	$phpmailer->Port        = defined( 'CLOUD_SMTP_PORT' ) ? (int) CLOUD_SMTP_PORT : 25;
	$phpmailer->SMTPAuth    = false;
	$phpmailer->SMTPSecure  = '';
	$phpmailer->SMTPAutoTLS = false;
	$phpmailer->Timeout     = 15;
}
add_action( 'phpmailer_init', 'cloud_platform_phpmailer_init', PHP_INT_MAX );

add_action(
	'wp_mail_succeeded',
	static function ( $mail ) {
		cloud_platform_mail_log( is_array( $mail ) ? $mail : array(), true );
	}
);
add_action(
	'wp_mail_failed',
	static function ( $error ) {
		$data = is_wp_error( $error ) ? $error->get_error_data() : array();
		cloud_platform_mail_log( is_array( $data ) ? $data : array(), false, is_wp_error( $error ) ? $error->get_error_message() : 'unknown error' );
	}
);

/* ---------------------------------------------------------------------------------------------
 * wordpress.org is not reachable from this platform (the plugin directory and core updates are the
 * platform's): calls to it fail at once instead of holding a PHP worker until a timeout.
 */
add_filter(
	'pre_http_request',
	static function ( $pre, $args, $url ) {
		$host = wp_parse_url( $url, PHP_URL_HOST );
		if ( false === $pre && is_string( $host ) && preg_match( '/(^|\.)wordpress\.org$/i', $host ) ) {
			return new WP_Error( 'http_request_failed', 'wordpress.org is not reachable from this host; updates come from the platform.' );
		}
		return $pre;
	},
	10,
	3
);
