<?php
/**
 * The platform's WordPress configuration: the same file for every site, copied to the site's root
 * (S/wp-config.php, one level above ABSPATH = S/public/). It holds no value of its own: everything
 * comes from the JSON files beside it, written by the platform (providers/wordpress/site-files.ts):
 *
 *   S/config/site.json       {db: {host, port, name, user, password, ca_file}, table_prefix,
 *                             salts: {AUTH_KEY, ...}, smtp: {host, port} | null, mu_plugin_dir, private_dir}
 *   S/config/constants.json  recipe constants, name -> string | number | boolean
 *   S/config/secrets.json    recipe secret constants, name -> 64 hex characters
 *
 * The database server only accepts TLS: mysqli connects with MYSQLI_CLIENT_SSL and verifies the
 * server's certificate and name (MYSQLI_CLIENT_SSL_VERIFY_SERVER_CERT) against the CA in
 * `db.ca_file`, which PHP must be given as `openssl.cafile` (php-fpm: php_admin_value, CLI: -d):
 * mysqlnd reads no CA of its own, and a `db.php` drop-in would live in the site's own wp-content.
 */

(static function () {
	$fail = static function ( $message ) {
		if ( PHP_SAPI !== 'cli' && ! headers_sent() ) {
			header( 'HTTP/1.1 503 Service Unavailable' );
			header( 'Content-Type: text/plain; charset=utf-8' );
			header( 'Retry-After: 30' );
		}
		if ( PHP_SAPI === 'cli' ) {
			fwrite( STDERR, 'wp-config: ' . $message . "\n" );
		} else {
			echo 'This site is not configured correctly: ', $message, "\n";
		}
		exit( 1 );
	};
	$read = static function ( $name, $required ) use ( $fail ) {
		$file = __DIR__ . '/config/' . $name;
		if ( ! is_file( $file ) ) {
			if ( $required ) {
				$fail( 'config/' . $name . ' is missing.' );
			}
			return array();
		}
		$data = json_decode( (string) file_get_contents( $file ), true );
		if ( ! is_array( $data ) ) {
			$fail( 'config/' . $name . ' is not a JSON object (or is not readable).' );
		}
		return $data;
	};

	$site = $read( 'site.json', true );
	$db   = isset( $site['db'] ) && is_array( $site['db'] ) ? $site['db'] : array();
	foreach ( array( 'host', 'port', 'name', 'user', 'password', 'ca_file' ) as $key ) {
		if ( ! isset( $db[ $key ] ) || ! is_scalar( $db[ $key ] ) || '' === (string) $db[ $key ] ) {
			$fail( 'config/site.json has no db.' . $key . '.' );
		}
	}
	$ca = (string) $db['ca_file'];
	if ( ! is_readable( $ca ) ) {
		$fail( 'the database CA (db.ca_file) is missing or not readable.' );
	}
	if ( realpath( (string) ini_get( 'openssl.cafile' ) ) !== realpath( $ca ) ) {
		$fail( 'PHP must run with openssl.cafile=' . $ca . ' (the database CA) to reach the database over TLS.' );
	}

	define( 'DB_NAME', (string) $db['name'] );
	define( 'DB_USER', (string) $db['user'] );
	define( 'DB_PASSWORD', (string) $db['password'] );
	define( 'DB_HOST', $db['host'] . ':' . (int) $db['port'] );
	define( 'DB_CHARSET', 'utf8mb4' );
	define( 'DB_COLLATE', '' );
	define( 'MYSQL_CLIENT_FLAGS', MYSQLI_CLIENT_SSL | MYSQLI_CLIENT_SSL_VERIFY_SERVER_CERT );

	$prefix = isset( $site['table_prefix'] ) ? (string) $site['table_prefix'] : 'wp_';
	if ( ! preg_match( '/^[A-Za-z0-9_]{1,20}$/', $prefix ) ) {
		$fail( 'config/site.json has an invalid table_prefix.' );
	}
	$GLOBALS['table_prefix'] = $prefix;

	$salts = isset( $site['salts'] ) && is_array( $site['salts'] ) ? $site['salts'] : array();
	foreach ( array( 'AUTH_KEY', 'SECURE_AUTH_KEY', 'LOGGED_IN_KEY', 'NONCE_KEY', 'AUTH_SALT', 'SECURE_AUTH_SALT', 'LOGGED_IN_SALT', 'NONCE_SALT' ) as $salt ) {
		if ( ! isset( $salts[ $salt ] ) || ! is_string( $salts[ $salt ] ) || strlen( $salts[ $salt ] ) < 32 ) {
			$fail( 'config/site.json has no salts.' . $salt . '.' );
		}
		define( $salt, $salts[ $salt ] );
	}

	if ( empty( $site['mu_plugin_dir'] ) || ! is_string( $site['mu_plugin_dir'] ) ) {
		$fail( 'config/site.json has no mu_plugin_dir.' );
	}
	define( 'WPMU_PLUGIN_DIR', $site['mu_plugin_dir'] );
	define( 'CLOUD_SITE_ROOT', __DIR__ );
	define( 'CLOUD_PRIVATE_DIR', isset( $site['private_dir'] ) && is_string( $site['private_dir'] ) ? $site['private_dir'] : __DIR__ . '/private' );
	if ( isset( $site['smtp'] ) && is_array( $site['smtp'] ) && ! empty( $site['smtp']['host'] ) ) {
		define( 'CLOUD_SMTP_HOST', (string) $site['smtp']['host'] );
		define( 'CLOUD_SMTP_PORT', isset( $site['smtp']['port'] ) ? (int) $site['smtp']['port'] : 25 );
	}

	// Files are the platform's business: core is read-only and updated by the platform.
	define( 'DISALLOW_FILE_EDIT', true );
	define( 'AUTOMATIC_UPDATER_DISABLED', true );
	define( 'WP_AUTO_UPDATE_CORE', false );

	// Recipe constants, then secrets. A name already defined (everything above) is kept as it is;
	// the platform's own settings are never taken from these files, whatever they hold.
	$reserved = '/^(DB_|CLOUD_|WPMU_|WP_CONTENT_|WP_PLUGIN_|WP_HOME$|WP_SITEURL$|ABSPATH$|WPINC$|PLUGINDIR$|MUPLUGINDIR$|UPLOADS$|MULTISITE$|WP_ALLOW_MULTISITE$|SUBDOMAIN_INSTALL$|DOMAIN_CURRENT_SITE$|PATH_CURRENT_SITE$|SITE_ID_CURRENT_SITE$|BLOG_ID_CURRENT_SITE$|CUSTOM_USER_TABLE$|CUSTOM_USER_META_TABLE$|MYSQL_)/';
	foreach ( array( 'constants.json', 'secrets.json' ) as $file ) {
		foreach ( $read( $file, false ) as $name => $value ) {
			if ( ! is_string( $name ) || ! preg_match( '/^[A-Za-z_][A-Za-z0-9_]{0,99}$/', $name ) || preg_match( $reserved, strtoupper( $name ) ) ) {
				continue;
			}
			if ( ! is_string( $value ) && ! is_int( $value ) && ! is_float( $value ) && ! is_bool( $value ) ) {
				continue;
			}
			if ( ! defined( $name ) ) {
				define( $name, $value );
			}
		}
	}
})();

if ( ! defined( 'ABSPATH' ) ) {
	define( 'ABSPATH', __DIR__ . '/public/' );
}

require_once ABSPATH . 'wp-settings.php';
