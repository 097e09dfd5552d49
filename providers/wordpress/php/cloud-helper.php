<?php
/**
 * The platform's helper inside one WordPress site (wp-cli is not available): loads WordPress and
 * calls its own functions. Run by the platform (providers/wordpress/helper.ts) as
 *
 *   php -d openssl.cafile=<db CA> cloud-helper.php    (as the site's OS account, cwd S, env CLOUD_WP_SITE=S)
 *
 * Input: ONE JSON object on stdin, {command, args}. Output: ONE JSON object on stdout,
 * {ok: true, result} or {ok: false, error: {code: not_found|refused|failed, message, param?, what?}}.
 * Exit status 0 unless PHP itself dies (the answer is still written then). Arguments are data only:
 * nothing is ever interpolated into code, a shell or SQL; there is no eval and no way to run code
 * other than WordPress's and the site's plugins' own.
 *
 * `refused` messages are written for the site's owner; `failed` messages are for the platform's logs.
 */

if ( PHP_SAPI !== 'cli' ) {
	exit( 1 );
}
ini_set( 'display_errors', 'stderr' );
ini_set( 'log_errors', '0' );

const CLOUD_HELPER_MAX_INPUT       = 8388608;
const CLOUD_HELPER_MAX_ZIP_ENTRIES = 5000;
const CLOUD_HELPER_MAX_ZIP_BYTES   = 104857600;

/** A refusal or failure the command answers with. */
class Cloud_Helper_Error extends Exception {
	/** @var string */
	public $kind;
	/** @var string|null */
	public $param;
	/** @var string|null */
	public $what;

	public function __construct( $kind, $message, $param = null, $what = null ) {
		parent::__construct( $message );
		$this->kind  = $kind;
		$this->param = $param;
		$this->what  = $what;
	}
}

$GLOBALS['cloud_helper'] = array(
	'responded' => false,
	'phase'     => 'start',
);

/** Writes the one answer (once) and swallows whatever WordPress prints afterwards. */
function cloud_helper_respond( array $payload ) {
	if ( $GLOBALS['cloud_helper']['responded'] ) {
		return;
	}
	$GLOBALS['cloud_helper']['responded'] = true;
	while ( ob_get_level() > 0 ) {
		ob_end_clean();
	}
	$json = json_encode( $payload, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_INVALID_UTF8_SUBSTITUTE | JSON_PARTIAL_OUTPUT_ON_ERROR );
	fwrite( STDOUT, $json . "\n" );
	fflush( STDOUT );
	ob_start(
		static function () {
			return '';
		}
	);
}

function cloud_helper_error_payload( $kind, $message, $param = null, $what = null ) {
	$error = array(
		'code'    => $kind,
		'message' => $message,
	);
	if ( null !== $param ) {
		$error['param'] = $param;
	}
	if ( null !== $what ) {
		$error['what'] = $what;
	}
	return array(
		'ok'    => false,
		'error' => $error,
	);
}

function cloud_helper_refuse( $message, $param = null ) {
	throw new Cloud_Helper_Error( 'refused', $message, $param );
}

function cloud_helper_not_found( $what, $message ) {
	throw new Cloud_Helper_Error( 'not_found', $message, null, $what );
}

function cloud_helper_failed( $message ) {
	throw new Cloud_Helper_Error( 'failed', $message );
}

/** WordPress's wp_die() while the helper runs: an error answer, never an HTML page. */
function cloud_helper_wp_die( $message, $title = '', $args = array() ) {
	if ( is_wp_error( $message ) ) {
		$message = $message->get_error_message();
	}
	$text = trim( preg_replace( '/\s+/', ' ', wp_strip_all_tags( (string) $message ) ) );
	throw new Cloud_Helper_Error( 'failed', 'WordPress stopped: ' . ( '' !== $text ? $text : ( is_string( $title ) ? $title : 'no message' ) ) );
}

register_shutdown_function(
	static function () {
		if ( $GLOBALS['cloud_helper']['responded'] ) {
			return;
		}
		$message = 'loading' === $GLOBALS['cloud_helper']['phase'] ? 'WordPress stopped while loading' : 'the command stopped before answering';
		$error   = error_get_last();
		if ( $error && in_array( $error['type'], array( E_ERROR, E_PARSE, E_CORE_ERROR, E_COMPILE_ERROR, E_USER_ERROR, E_RECOVERABLE_ERROR ), true ) ) {
			$message .= ': PHP error: ' . $error['message'] . ' in ' . $error['file'] . ':' . $error['line'];
		} elseif ( 'loading' === $GLOBALS['cloud_helper']['phase'] && function_exists( 'is_blog_installed' ) && ! is_blog_installed() ) {
			$message = 'WordPress is not installed on this site';
		}
		cloud_helper_respond( cloud_helper_error_payload( 'failed', $message ) );
	}
);

/* ------------------------------------------------------------------------------------------ */
/* Input and the site.                                                                          */

function cloud_helper_input() {
	$raw = stream_get_contents( STDIN, CLOUD_HELPER_MAX_INPUT + 1 );
	if ( false === $raw || strlen( $raw ) > CLOUD_HELPER_MAX_INPUT ) {
		cloud_helper_refuse( 'The request is too large.' );
	}
	$request = json_decode( $raw, true, 64 );
	if ( ! is_array( $request ) || ! isset( $request['command'] ) || ! is_string( $request['command'] ) ) {
		cloud_helper_refuse( 'The request must be a JSON object {command, args}.' );
	}
	$args = isset( $request['args'] ) ? $request['args'] : array();
	if ( ! is_array( $args ) ) {
		cloud_helper_refuse( 'args must be an object.', 'args' );
	}
	return array( $request['command'], $args );
}

function cloud_helper_site_root() {
	$site = getenv( 'CLOUD_WP_SITE' );
	if ( ! is_string( $site ) || '' === $site || '/' !== $site[0] ) {
		cloud_helper_failed( 'CLOUD_WP_SITE must name the site root (an absolute path)' );
	}
	$root = realpath( $site );
	if ( false === $root || ! is_file( $root . '/public/wp-load.php' ) || ! is_file( $root . '/wp-config.php' ) ) {
		cloud_helper_failed( 'CLOUD_WP_SITE is not a site root (no public/wp-load.php or wp-config.php)' );
	}
	return $root;
}

/** `{host, port, https}` of an http(s) URL with no path beyond `/`, or a refusal naming `param`. */
function cloud_helper_site_url( $url, $param ) {
	if ( ! is_string( $url ) || strlen( $url ) > 2000 ) {
		cloud_helper_refuse( 'A site URL (http or https) is required.', $param );
	}
	$parts = parse_url( $url );
	if ( ! is_array( $parts ) || ! isset( $parts['scheme'], $parts['host'] ) || ! in_array( strtolower( $parts['scheme'] ), array( 'http', 'https' ), true )
		|| isset( $parts['user'] ) || isset( $parts['pass'] ) || isset( $parts['query'] ) || isset( $parts['fragment'] )
		|| ( isset( $parts['path'] ) && '' !== $parts['path'] && '/' !== $parts['path'] )
		|| ! preg_match( '/^[A-Za-z0-9.-]+$|^\[[0-9A-Fa-f:.]+\]$/', $parts['host'] ) ) {
		cloud_helper_refuse( 'The URL must be http(s)://host[:port] with no path, query or credentials.', $param );
	}
	return array(
		'url'   => strtolower( $parts['scheme'] ) . '://' . strtolower( $parts['host'] ) . ( isset( $parts['port'] ) ? ':' . (int) $parts['port'] : '' ),
		'host'  => strtolower( $parts['host'] ) . ( isset( $parts['port'] ) ? ':' . (int) $parts['port'] : '' ),
		'name'  => strtolower( $parts['host'] ),
		'https' => 'https' === strtolower( $parts['scheme'] ),
	);
}

/** The request WordPress believes it serves: the site's own host, `/`. */
function cloud_helper_fake_request( $root, $host, $name, $https ) {
	$_SERVER['HTTP_HOST']       = $host;
	$_SERVER['SERVER_NAME']     = $name;
	$_SERVER['SERVER_PORT']     = $https ? '443' : '80';
	$_SERVER['REQUEST_URI']     = '/';
	$_SERVER['REQUEST_METHOD']  = 'GET';
	$_SERVER['SCRIPT_NAME']     = '/index.php';
	$_SERVER['PHP_SELF']        = '/index.php';
	$_SERVER['SCRIPT_FILENAME'] = $root . '/public/index.php';
	$_SERVER['REMOTE_ADDR']     = '127.0.0.1';
	$_SERVER['SERVER_PROTOCOL'] = 'HTTP/1.1';
	$_SERVER['HTTP_USER_AGENT'] = 'cloud-helper';
	if ( $https ) {
		$_SERVER['HTTPS'] = 'on';
	} else {
		unset( $_SERVER['HTTPS'] );
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Plugins.                                                                                     */

function cloud_helper_valid_slug( $slug, $param = 'slug' ) {
	if ( ! is_string( $slug ) || ! preg_match( '/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/', $slug ) ) {
		cloud_helper_refuse( 'A plugin slug is letters, digits, dots, dashes and underscores.', $param );
	}
	return $slug;
}

/** slug => plugin file (relative to the plugins directory), the slug being the plugin's folder. */
function cloud_helper_plugin_files() {
	wp_clean_plugins_cache( false );
	$files = array();
	foreach ( array_keys( get_plugins() ) as $file ) {
		$slug = false !== strpos( $file, '/' ) ? dirname( $file ) : basename( $file, '.php' );
		if ( ! isset( $files[ $slug ] ) || $file === $slug . '/' . $slug . '.php' ) {
			$files[ $slug ] = $file;
		}
	}
	ksort( $files );
	return $files;
}

function cloud_helper_plugin_entry( $slug, $file ) {
	$plugins = get_plugins();
	$data    = isset( $plugins[ $file ] ) ? $plugins[ $file ] : array();
	return array(
		'slug'    => $slug,
		'name'    => isset( $data['Name'] ) && '' !== $data['Name'] ? $data['Name'] : $slug,
		'version' => isset( $data['Version'] ) ? (string) $data['Version'] : '',
		'active'  => is_plugin_active( $file ),
	);
}

function cloud_helper_plugin_file( $slug ) {
	$files = cloud_helper_plugin_files();
	if ( ! isset( $files[ $slug ] ) ) {
		cloud_helper_not_found( 'plugin ' . $slug, 'The plugin "' . $slug . '" is not installed on this site.' );
	}
	return $files[ $slug ];
}

/** Removes a file or a directory tree without ever following a symbolic link. */
function cloud_helper_rmtree( $path ) {
	if ( is_link( $path ) || is_file( $path ) ) {
		return @unlink( $path );
	}
	if ( ! is_dir( $path ) ) {
		return true;
	}
	$entries = scandir( $path );
	foreach ( false === $entries ? array() : $entries as $entry ) {
		if ( '.' !== $entry && '..' !== $entry ) {
			cloud_helper_rmtree( $path . '/' . $entry );
		}
	}
	return @rmdir( $path );
}

function cloud_helper_activate( $file ) {
	$result = activate_plugin( $file, '', false, false );
	if ( is_wp_error( $result ) && 'unexpected_output' !== $result->get_error_code() ) {
		cloud_helper_refuse( 'WordPress could not activate the plugin: ' . wp_strip_all_tags( $result->get_error_message() ), 'slug' );
	}
}

/**
 * Checks every entry of the zip before anything is written: names inside one top folder equal to
 * the slug, no `..`, absolute path or backslash, no symbolic link or device, at most 5000 entries
 * and 100 MB uncompressed. `__MACOSX/` entries and `./` segments are skipped (see below); a zip of
 * nothing else holds no plugin.
 */
function cloud_helper_zip_entries( ZipArchive $zip, $slug ) {
	if ( $zip->numFiles > CLOUD_HELPER_MAX_ZIP_ENTRIES ) {
		cloud_helper_refuse( 'The zip holds more than ' . CLOUD_HELPER_MAX_ZIP_ENTRIES . ' entries.', 'zip' );
	}
	if ( 0 === $zip->numFiles ) {
		cloud_helper_refuse( 'The zip is empty.', 'zip' );
	}
	$entries = array();
	$total   = 0;
	for ( $i = 0; $i < $zip->numFiles; $i++ ) {
		$stat = $zip->statIndex( $i, ZipArchive::FL_UNCHANGED );
		if ( false === $stat ) {
			cloud_helper_refuse( 'The zip cannot be read.', 'zip' );
		}
		$name = $stat['name'];
		if ( '' === $name || false !== strpos( $name, "\0" ) || false !== strpos( $name, '\\' ) ) {
			cloud_helper_refuse( 'The zip has an entry with an invalid name.', 'zip' );
		}
		if ( '/' === $name[0] || preg_match( '/^[A-Za-z]:/', $name ) ) {
			cloud_helper_refuse( 'The zip has an entry with an absolute path.', 'zip' );
		}
		$is_dir = '/' === substr( $name, -1 );
		$parts  = array();
		foreach ( explode( '/', $name ) as $part ) {
			if ( '..' === $part ) {
				cloud_helper_refuse( 'The zip has an entry outside its folder (..).', 'zip' );
			}
			// `./` and empty segments name nothing (`./slug/x.php` is `slug/x.php`).
			if ( '' !== $part && '.' !== $part ) {
				$parts[] = $part;
			}
		}
		// A folder entry of its own (`./`), and macOS's resource forks: skipped, never extracted, as
		// WordPress and the control plane's zipTopFolder (domain/wordpress/plugins.ts) skip them.
		if ( 0 === count( $parts ) || '__MACOSX' === $parts[0] ) {
			continue;
		}
		if ( $parts[0] !== $slug || ( 1 === count( $parts ) && ! $is_dir ) ) {
			cloud_helper_refuse( 'The zip\'s top folder must be the plugin\'s slug "' . $slug . '".', 'slug' );
		}
		$opsys = 0;
		$attr  = 0;
		if ( $zip->getExternalAttributesIndex( $i, $opsys, $attr, ZipArchive::FL_UNCHANGED ) && ZipArchive::OPSYS_UNIX === $opsys ) {
			$type = ( $attr >> 16 ) & 0170000;
			if ( 0120000 === $type ) {
				cloud_helper_refuse( 'The zip holds a symbolic link.', 'zip' );
			}
			if ( 0 !== $type && 0100000 !== $type && 0040000 !== $type ) {
				cloud_helper_refuse( 'The zip holds an entry that is neither a file nor a folder.', 'zip' );
			}
			if ( 0040000 === $type && ! $is_dir ) {
				$is_dir = true;
			}
		}
		$total += (int) $stat['size'];
		if ( $total > CLOUD_HELPER_MAX_ZIP_BYTES ) {
			cloud_helper_refuse( 'The zip holds more than 100 MB uncompressed.', 'zip' );
		}
		$entries[] = array(
			'index' => $i,
			'path'  => implode( '/', $parts ),
			'dir'   => $is_dir,
			'size'  => (int) $stat['size'],
		);
	}
	return $entries;
}

function cloud_helper_extract( ZipArchive $zip, array $entries, $into ) {
	$written = 0;
	foreach ( $entries as $entry ) {
		$target = $into . '/' . $entry['path'];
		if ( $entry['dir'] ) {
			if ( ! is_dir( $target ) && ! mkdir( $target, 0755, true ) ) {
				cloud_helper_refuse( 'The zip has conflicting entries.', 'zip' );
			}
			continue;
		}
		$parent = dirname( $target );
		if ( ! is_dir( $parent ) && ! mkdir( $parent, 0755, true ) ) {
			cloud_helper_refuse( 'The zip has conflicting entries.', 'zip' );
		}
		$in  = $zip->getStreamIndex( $entry['index'], ZipArchive::FL_UNCHANGED );
		$out = @fopen( $target, 'xb' );
		if ( false === $in || false === $out ) {
			cloud_helper_refuse( 'The zip has conflicting or unreadable entries.', 'zip' );
		}
		$size = 0;
		while ( ! feof( $in ) ) {
			$chunk = fread( $in, 65536 );
			if ( false === $chunk ) {
				cloud_helper_refuse( 'The zip is damaged.', 'zip' );
			}
			$size    += strlen( $chunk );
			$written += strlen( $chunk );
			if ( $size > $entry['size'] || $written > CLOUD_HELPER_MAX_ZIP_BYTES ) {
				cloud_helper_refuse( 'The zip holds more data than it declares.', 'zip' );
			}
			fwrite( $out, $chunk );
		}
		fclose( $in );
		if ( ! fclose( $out ) || $size !== $entry['size'] ) {
			cloud_helper_refuse( 'The zip is damaged.', 'zip' );
		}
		chmod( $target, 0644 );
	}
}

/** Whether a folder holds a plugin (a PHP file at its top with a Plugin Name header). */
function cloud_helper_has_plugin_header( $dir ) {
	foreach ( (array) glob( $dir . '/*.php' ) as $file ) {
		if ( is_file( $file ) && ! is_link( $file ) ) {
			$data = get_plugin_data( $file, false, false );
			if ( ! empty( $data['Name'] ) ) {
				return true;
			}
		}
	}
	return false;
}

function cloud_helper_plugin_install( array $args ) {
	$slug = cloud_helper_valid_slug( isset( $args['slug'] ) ? $args['slug'] : null );
	$zip_path = isset( $args['zip'] ) ? $args['zip'] : null;
	if ( ! is_string( $zip_path ) || '' === $zip_path || '/' !== $zip_path[0] || ! is_file( $zip_path ) || ! is_readable( $zip_path ) ) {
		cloud_helper_failed( 'zip must name a readable zip file (absolute path)' );
	}
	$zip = new ZipArchive();
	if ( true !== $zip->open( $zip_path, ZipArchive::RDONLY ) ) {
		cloud_helper_refuse( 'The file is not a zip archive.', 'zip' );
	}
	$entries = cloud_helper_zip_entries( $zip, $slug );

	$upgrade = WP_CONTENT_DIR . '/upgrade';
	if ( ! is_dir( $upgrade ) && ! mkdir( $upgrade, 0755, true ) ) {
		cloud_helper_failed( 'cannot create ' . $upgrade );
	}
	if ( ! is_dir( WP_PLUGIN_DIR ) && ! mkdir( WP_PLUGIN_DIR, 0755, true ) ) {
		cloud_helper_failed( 'cannot create ' . WP_PLUGIN_DIR );
	}
	$staging = $upgrade . '/cloud-' . bin2hex( random_bytes( 8 ) );
	if ( ! mkdir( $staging, 0755 ) ) {
		cloud_helper_failed( 'cannot create ' . $staging );
	}
	try {
		cloud_helper_extract( $zip, $entries, $staging );
		$zip->close();
		if ( ! cloud_helper_has_plugin_header( $staging . '/' . $slug ) ) {
			cloud_helper_refuse( 'The zip holds no WordPress plugin (no PHP file with a "Plugin Name" header in its top folder).', 'zip' );
		}
		$dest = WP_PLUGIN_DIR . '/' . $slug;
		$old  = $staging . '.old';
		if ( ( file_exists( $dest ) || is_link( $dest ) ) && ! rename( $dest, $old ) ) {
			cloud_helper_failed( 'cannot move the installed copy of ' . $slug . ' aside' );
		}
		if ( ! rename( $staging . '/' . $slug, $dest ) ) {
			if ( file_exists( $old ) || is_link( $old ) ) {
				rename( $old, $dest );
			}
			cloud_helper_failed( 'cannot move the new copy of ' . $slug . ' into place' );
		}
		cloud_helper_rmtree( $old );
	} finally {
		cloud_helper_rmtree( $staging );
	}
	$file = cloud_helper_plugin_file( $slug );
	if ( ! empty( $args['activate'] ) ) {
		cloud_helper_activate( $file );
	}
	return cloud_helper_plugin_entry( $slug, $file );
}

/* ------------------------------------------------------------------------------------------ */
/* The allowlisted commands (recipes' verify and the site command-line endpoint).              */

function cloud_helper_command( array $args ) {
	$argv = isset( $args['argv'] ) ? $args['argv'] : null;
	if ( ! is_array( $argv ) || array_values( $argv ) !== $argv ) {
		cloud_helper_refuse( 'argv must be a list of strings.', 'argv' );
	}
	foreach ( $argv as $word ) {
		if ( ! is_string( $word ) ) {
			cloud_helper_refuse( 'argv must be a list of strings.', 'argv' );
		}
	}
	if ( isset( $argv[0] ) && 'wp' === $argv[0] ) {
		array_shift( $argv );
	}
	$shape = implode( ' ', array_slice( $argv, 0, 2 ) );
	$n     = count( $argv );
	if ( 'option get' === $shape && 3 === $n ) {
		$missing = new stdClass();
		$value   = get_option( $argv[2], $missing );
		if ( $value === $missing ) {
			return array(
				'exit_code' => 1,
				'output'    => "Error: Could not get '" . $argv[2] . "' option. Does it exist?",
			);
		}
		return array(
			'exit_code' => 0,
			'output'    => is_scalar( $value ) || null === $value ? ( is_bool( $value ) ? ( $value ? '1' : '' ) : (string) $value ) : wp_json_encode( $value ),
		);
	}
	if ( ( 'plugin is-active' === $shape || 'plugin is-installed' === $shape ) && 3 === $n ) {
		$files = cloud_helper_plugin_files();
		$ok    = isset( $files[ $argv[2] ] ) && ( 'plugin is-installed' === $shape || is_plugin_active( $files[ $argv[2] ] ) );
		return array(
			'exit_code' => $ok ? 0 : 1,
			'output'    => '',
		);
	}
	if ( 'role exists' === $shape && 3 === $n ) {
		$ok = null !== get_role( $argv[2] );
		return array(
			'exit_code' => $ok ? 0 : 1,
			'output'    => $ok ? "Success: Role with ID '" . $argv[2] . "' exists." : "Error: Role with ID '" . $argv[2] . "' does not exist.",
		);
	}
	if ( 'core version' === $shape && 2 === $n ) {
		return array(
			'exit_code' => 0,
			'output'    => $GLOBALS['wp_version'],
		);
	}
	cloud_helper_refuse( 'Only these commands are allowed: option get <name>, plugin is-active <slug>, plugin is-installed <slug>, role exists <name>, core version.', 'argv' );
}

/* ------------------------------------------------------------------------------------------ */
/* Cron.                                                                                        */

/** Every scheduled occurrence: [{time, hook, key, schedule, args}]. */
function cloud_helper_cron_events( $only_hook = null ) {
	$events = array();
	$crons  = _get_cron_array();
	foreach ( is_array( $crons ) ? $crons : array() as $time => $hooks ) {
		foreach ( (array) $hooks as $hook => $occurrences ) {
			if ( null !== $only_hook && $hook !== $only_hook ) {
				continue;
			}
			foreach ( (array) $occurrences as $event ) {
				$events[] = array(
					'time'     => (int) $time,
					'hook'     => (string) $hook,
					'schedule' => empty( $event['schedule'] ) ? false : $event['schedule'],
					'args'     => isset( $event['args'] ) && is_array( $event['args'] ) ? $event['args'] : array(),
				);
			}
		}
	}
	return $events;
}

function cloud_helper_valid_hook( array $args ) {
	$hook = isset( $args['hook'] ) ? $args['hook'] : null;
	if ( ! is_string( $hook ) || '' === $hook || strlen( $hook ) > 200 ) {
		cloud_helper_refuse( 'A cron hook name is required.', 'hook' );
	}
	return $hook;
}

/**
 * Takes WordPress's own cron lock (the `doing_cron` transient wp-cron.php and spawn_cron respect),
 * waiting up to 15 s for a run in progress: the schedule is one option, so a front-end cron run at
 * the same moment would otherwise lose one of the two runs' changes (an event rescheduled twice, or
 * not at all). Returns the key to release.
 */
function cloud_helper_cron_lock() {
	$deadline = microtime( true ) + 15;
	for ( ;; ) {
		$held = get_transient( 'doing_cron' );
		if ( ! $held || ( (float) $held + WP_CRON_LOCK_TIMEOUT ) < microtime( true ) || microtime( true ) > $deadline ) {
			break;
		}
		usleep( 200000 );
	}
	$key = sprintf( '%.22F', microtime( true ) );
	set_transient( 'doing_cron', $key );
	return $key;
}

function cloud_helper_cron_unlock( $key ) {
	if ( get_transient( 'doing_cron' ) === $key ) {
		delete_transient( 'doing_cron' );
	}
}

function cloud_helper_cron_run( array $args ) {
	$hook   = cloud_helper_valid_hook( $args );
	$lock   = cloud_helper_cron_lock();
	try {
		return cloud_helper_cron_run_locked( $hook );
	} finally {
		cloud_helper_cron_unlock( $lock );
	}
}

function cloud_helper_cron_run_locked( $hook ) {
	$events = cloud_helper_cron_events( $hook );
	if ( ! $events ) {
		cloud_helper_not_found( 'cron hook ' . $hook, 'Nothing is scheduled for the cron hook "' . $hook . '".' );
	}
	if ( ! defined( 'DOING_CRON' ) ) {
		define( 'DOING_CRON', true );
	}
	$executed_at = gmdate( 'Y-m-d\TH:i:s\Z' );
	// Unschedule, reschedule a recurring event, then run. (WordPress's own runner reschedules first:
	// it only runs events that are due, whose next time is always later. An event run before it is
	// due, in the second it was scheduled for an interval ahead, would be rescheduled onto itself
	// and then removed.)
	foreach ( $events as $event ) {
		wp_unschedule_event( $event['time'], $event['hook'], $event['args'] );
		if ( false !== $event['schedule'] ) {
			wp_reschedule_event( $event['time'], $event['schedule'], $event['hook'], $event['args'] );
		}
		do_action_ref_array( $event['hook'], array_values( $event['args'] ) );
	}
	return array(
		'hook'        => $hook,
		'executed_at' => $executed_at,
		'runs'        => count( $events ),
	);
}

/* ------------------------------------------------------------------------------------------ */
/* The commands.                                                                                */

function cloud_helper_option_name( $name, $param ) {
	if ( ! is_string( $name ) || '' === $name || strlen( $name ) > 191 ) {
		cloud_helper_refuse( 'An option name is 1 to 191 characters.', $param );
	}
	return $name;
}

/**
 * Options only the platform writes, through their own commands. Recipes refuse each of them at
 * registration too (domain/wordpress/recipes.ts PLATFORM_OPTIONS, which must hold every name here).
 */
const CLOUD_HELPER_PLATFORM_OPTIONS = array( 'cloud_autologin', 'cloud_cdn_url', 'siteurl', 'home', 'db_version' );

function cloud_helper_run( $command, array $args, $root ) {
	switch ( $command ) {
		case 'install':
			if ( is_blog_installed() ) {
				return array( 'installed' => false );
			}
			$title = isset( $args['title'] ) ? $args['title'] : null;
			$email = isset( $args['admin_email'] ) ? $args['admin_email'] : null;
			$user  = isset( $args['admin_user'] ) ? $args['admin_user'] : 'admin';
			if ( ! is_string( $title ) || '' === trim( $title ) ) {
				cloud_helper_refuse( 'A site title is required.', 'title' );
			}
			if ( ! is_string( $email ) || ! is_email( $email ) ) {
				cloud_helper_refuse( 'A valid administrator e-mail address is required.', 'admin_email' );
			}
			if ( ! is_string( $user ) || sanitize_user( $user, true ) !== $user || '' === $user ) {
				cloud_helper_refuse( 'Invalid administrator user name.', 'admin_user' );
			}
			$url = cloud_helper_site_url( isset( $args['url'] ) ? $args['url'] : null, 'url' );
			require_once ABSPATH . 'wp-admin/includes/upgrade.php';
			// The pretty-permalink probe asks the site over HTTP, which may not answer yet: fail it at once.
			add_filter(
				'pre_http_request',
				static function () {
					return new WP_Error( 'http_request_failed', 'no HTTP during the installation' );
				}
			);
			$result = wp_install( $title, $user, $email, true, '', wp_generate_password( 32, true, true ) );
			update_option( 'siteurl', $url['url'] );
			update_option( 'home', $url['url'] );
			return array(
				'installed'  => true,
				'admin_user' => $user,
				'user_id'    => (int) $result['user_id'],
			);

		case 'status':
			$installed = is_blog_installed();
			$recipe    = $installed ? get_option( 'cloud_recipe', null ) : null;
			return array(
				'installed'  => $installed,
				'wp_version' => $GLOBALS['wp_version'],
				'db_version' => $installed ? (int) get_option( 'db_version' ) : null,
				'files_db_version' => (int) $GLOBALS['wp_db_version'],
				'recipe'     => is_array( $recipe ) || is_object( $recipe ) ? $recipe : null,
			);

		case 'option.get':
			$name    = cloud_helper_option_name( isset( $args['name'] ) ? $args['name'] : null, 'name' );
			$missing = new stdClass();
			$value   = get_option( $name, $missing );
			return $value === $missing ? array(
				'exists' => false,
				'value'  => null,
			) : array(
				'exists' => true,
				'value'  => $value,
			);

		case 'options.update':
			$options = isset( $args['options'] ) ? $args['options'] : null;
			if ( ! is_array( $options ) ) {
				cloud_helper_refuse( 'options must be an object.', 'options' );
			}
			foreach ( $options as $name => $value ) {
				cloud_helper_option_name( (string) $name, 'options' );
				if ( in_array( strtolower( (string) $name ), CLOUD_HELPER_PLATFORM_OPTIONS, true ) ) {
					cloud_helper_refuse( 'The option "' . $name . '" is managed by the platform.', 'options.' . $name );
				}
			}
			$updated = array();
			foreach ( $options as $name => $value ) {
				if ( update_option( (string) $name, $value ) ) {
					$updated[] = (string) $name;
				}
			}
			return array( 'updated' => $updated );

		case 'urls.set':
			$url = cloud_helper_site_url( isset( $args['url'] ) ? $args['url'] : null, 'url' );
			update_option( 'home', $url['url'] );
			update_option( 'siteurl', $url['url'] );
			return array( 'url' => $url['url'] );

		case 'plugins.list':
			$list = array();
			foreach ( cloud_helper_plugin_files() as $slug => $file ) {
				$list[] = cloud_helper_plugin_entry( (string) $slug, $file );
			}
			return $list;

		case 'plugin.install':
			return cloud_helper_plugin_install( $args );

		case 'plugin.activate':
			$slug = cloud_helper_valid_slug( isset( $args['slug'] ) ? $args['slug'] : null );
			$file = cloud_helper_plugin_file( $slug );
			cloud_helper_activate( $file );
			return cloud_helper_plugin_entry( $slug, $file );

		case 'plugin.deactivate':
			$slug = cloud_helper_valid_slug( isset( $args['slug'] ) ? $args['slug'] : null );
			$file = cloud_helper_plugin_file( $slug );
			deactivate_plugins( $file, false );
			return cloud_helper_plugin_entry( $slug, $file );

		case 'plugin.delete':
			$slug = cloud_helper_valid_slug( isset( $args['slug'] ) ? $args['slug'] : null );
			$file = cloud_helper_plugin_file( $slug );
			deactivate_plugins( $file, false );
			// Files only: no uninstall.php / uninstall hook, so the plugin's settings stay.
			$path = false !== strpos( $file, '/' ) ? WP_PLUGIN_DIR . '/' . dirname( $file ) : WP_PLUGIN_DIR . '/' . $file;
			cloud_helper_rmtree( $path );
			wp_clean_plugins_cache( false );
			if ( file_exists( $path ) || is_link( $path ) ) {
				cloud_helper_failed( 'could not remove all of ' . $path );
			}
			return array( 'deleted' => $slug );

		case 'roles.add':
			$roles = isset( $args['roles'] ) ? $args['roles'] : null;
			if ( ! is_array( $roles ) || array_values( $roles ) !== $roles ) {
				cloud_helper_refuse( 'roles must be a list.', 'roles' );
			}
			foreach ( $roles as $i => $role ) {
				if ( ! is_array( $role ) || ! isset( $role['name'] ) || ! is_string( $role['name'] ) || ! preg_match( '/^[A-Za-z0-9_-]{1,64}$/', $role['name'] ) ) {
					cloud_helper_refuse( 'A role name is 1 to 64 letters, digits, dashes or underscores.', 'roles.' . $i . '.name' );
				}
				if ( ! isset( $role['display'] ) || ! is_string( $role['display'] ) || '' === trim( $role['display'] ) ) {
					cloud_helper_refuse( 'A role needs a display name.', 'roles.' . $i . '.display' );
				}
				$caps = isset( $role['caps'] ) ? $role['caps'] : array();
				if ( ! is_array( $caps ) || array_filter( $caps, static function ( $cap ) {
					return ! is_string( $cap ) || '' === $cap || strlen( $cap ) > 191;
				} ) ) {
					cloud_helper_refuse( 'A role\'s caps are a list of capability names.', 'roles.' . $i . '.caps' );
				}
			}
			$added = array();
			foreach ( $roles as $role ) {
				if ( null === get_role( $role['name'] ) ) {
					$caps = isset( $role['caps'] ) ? array_fill_keys( array_values( $role['caps'] ), true ) : array();
					if ( null !== add_role( $role['name'], $role['display'], $caps ) ) {
						$added[] = $role['name'];
					}
				}
			}
			return array( 'added' => $added );

		case 'command':
			return cloud_helper_command( $args );

		case 'cron.list':
			$list = array();
			foreach ( cloud_helper_cron_events() as $event ) {
				$list[] = array(
					'hook'        => $event['hook'],
					'schedule'    => false === $event['schedule'] ? null : $event['schedule'],
					'next_run_at' => gmdate( 'Y-m-d\TH:i:s\Z', $event['time'] ),
				);
			}
			return $list;

		case 'cron.run':
			return cloud_helper_cron_run( $args );

		case 'cron.delete':
			$hook = cloud_helper_valid_hook( $args );
			if ( ! cloud_helper_cron_events( $hook ) ) {
				cloud_helper_not_found( 'cron hook ' . $hook, 'Nothing is scheduled for the cron hook "' . $hook . '".' );
			}
			$lock    = cloud_helper_cron_lock();
			$removed = wp_unschedule_hook( $hook, true );
			cloud_helper_cron_unlock( $lock );
			if ( is_wp_error( $removed ) || false === $removed ) {
				cloud_helper_failed( 'wp_unschedule_hook failed: ' . ( is_wp_error( $removed ) ? $removed->get_error_message() : 'false' ) );
			}
			return array( 'removed' => (int) $removed );

		case 'core.upgrade_db':
			require_once ABSPATH . 'wp-admin/includes/upgrade.php';
			$from = (int) get_option( 'db_version' );
			wp_upgrade();
			wp_cache_delete( 'db_version', 'options' );
			wp_cache_delete( 'alloptions', 'options' );
			return array(
				'from_db_version' => $from,
				'to_db_version'   => (int) get_option( 'db_version' ),
				'wp_version'      => $GLOBALS['wp_version'],
			);

		case 'autologin.arm':
			$sha     = isset( $args['sha256'] ) ? $args['sha256'] : null;
			$expires = isset( $args['expires'] ) ? $args['expires'] : null;
			if ( ! is_string( $sha ) || ! preg_match( '/^[0-9a-fA-F]{64}$/', $sha ) ) {
				cloud_helper_refuse( 'sha256 must be 64 hexadecimal characters.', 'sha256' );
			}
			if ( ! is_int( $expires ) || $expires <= time() ) {
				cloud_helper_refuse( 'expires must be a time in the future (unix seconds).', 'expires' );
			}
			update_option(
				'cloud_autologin',
				array(
					'sha256'  => strtolower( $sha ),
					'expires' => $expires,
				),
				'no'
			);
			return array(
				'armed'   => true,
				'expires' => $expires,
			);

		case 'cdn.set':
			$cdn = array_key_exists( 'url', $args ) ? $args['url'] : null;
			if ( null === $cdn ) {
				delete_option( 'cloud_cdn_url' );
				return array( 'url' => null );
			}
			$parts = is_string( $cdn ) ? parse_url( $cdn ) : false;
			if ( ! is_array( $parts ) || ! isset( $parts['scheme'], $parts['host'] ) || ! in_array( strtolower( $parts['scheme'] ), array( 'http', 'https' ), true )
				|| isset( $parts['query'] ) || isset( $parts['fragment'] ) || isset( $parts['user'] ) || isset( $parts['pass'] ) ) {
				cloud_helper_refuse( 'The CDN URL must be an http(s) URL without query or credentials.', 'url' );
			}
			update_option( 'cloud_cdn_url', untrailingslashit( $cdn ), true );
			return array( 'url' => untrailingslashit( $cdn ) );

		case 'cache.flush':
			global $wpdb;
			$flushed = array();
			// Transients are WordPress's cache in the database (without an object cache).
			$wpdb->query( $wpdb->prepare( "DELETE FROM {$wpdb->options} WHERE option_name LIKE %s OR option_name LIKE %s", $wpdb->esc_like( '_transient_' ) . '%', $wpdb->esc_like( '_site_transient_' ) . '%' ) );
			$flushed[] = 'transients';
			$persistent = wp_using_ext_object_cache();
			wp_cache_flush();
			if ( $persistent ) {
				$flushed[] = 'object';
			}
			return array(
				'flushed'      => $flushed,
				'object_cache' => $persistent ? 'persistent' : 'none',
			);

		case 'mail.test':
			$to = isset( $args['to'] ) ? $args['to'] : null;
			if ( ! is_string( $to ) || ! is_email( $to ) ) {
				cloud_helper_refuse( 'A valid e-mail address is required.', 'to' );
			}
			$failure = null;
			add_action(
				'wp_mail_failed',
				static function ( $error ) use ( &$failure ) {
					$failure = is_wp_error( $error ) ? $error->get_error_message() : 'unknown error';
				}
			);
			$name = wp_specialchars_decode( get_option( 'blogname' ), ENT_QUOTES );
			$sent = wp_mail( $to, 'Test message from ' . $name, "This is a test message sent by the hosting platform for the site \"" . $name . "\" (" . home_url() . ").\n" );
			$relay = defined( 'CLOUD_SMTP_HOST' ) ? CLOUD_SMTP_HOST . ':' . ( defined( 'CLOUD_SMTP_PORT' ) ? CLOUD_SMTP_PORT : 25 ) : null;
			return array(
				'sent'   => (bool) $sent,
				'detail' => $sent ? 'Accepted by the mail relay ' . $relay . '.' : ( null !== $failure ? $failure : 'WordPress did not send the message.' ),
			);
	}
	cloud_helper_refuse( 'Unknown command "' . $command . '".', 'command' );
}

/* ------------------------------------------------------------------------------------------ */
/* Main: parse, load WordPress (at global scope, as WordPress expects), run, answer.             */

const CLOUD_HELPER_COMMANDS = array(
	'install', 'status', 'option.get', 'options.update', 'urls.set', 'plugins.list', 'plugin.install', 'plugin.activate',
	'plugin.deactivate', 'plugin.delete', 'roles.add', 'command', 'cron.list', 'cron.run', 'cron.delete', 'core.upgrade_db',
	'autologin.arm', 'cdn.set', 'cache.flush', 'mail.test',
);

try {
	list( $cloud_helper_command, $cloud_helper_args ) = cloud_helper_input();
	if ( ! in_array( $cloud_helper_command, CLOUD_HELPER_COMMANDS, true ) ) {
		cloud_helper_refuse( 'Unknown command "' . $cloud_helper_command . '".', 'command' );
	}
	$cloud_helper_root = cloud_helper_site_root();
	chdir( $cloud_helper_root );

	// Before WordPress loads: the host it serves (the install's URL, else the platform hostname of
	// site.json when it names one; the home option's host once loaded).
	$cloud_helper_host = array(
		'host'  => 'localhost',
		'name'  => 'localhost',
		'https' => false,
	);
	if ( 'install' === $cloud_helper_command ) {
		$cloud_helper_host = cloud_helper_site_url( isset( $cloud_helper_args['url'] ) ? $cloud_helper_args['url'] : null, 'url' );
	} else {
		$cloud_helper_site = @json_decode( (string) @file_get_contents( $cloud_helper_root . '/config/site.json' ), true );
		if ( is_array( $cloud_helper_site ) && isset( $cloud_helper_site['hostname'] ) && is_string( $cloud_helper_site['hostname'] ) && preg_match( '/^[A-Za-z0-9.-]{1,253}$/', $cloud_helper_site['hostname'] ) ) {
			$cloud_helper_host = array(
				'host'  => strtolower( $cloud_helper_site['hostname'] ),
				'name'  => strtolower( $cloud_helper_site['hostname'] ),
				'https' => false,
			);
		}
		unset( $cloud_helper_site );
	}
	cloud_helper_fake_request( $cloud_helper_root, $cloud_helper_host['host'], $cloud_helper_host['name'], $cloud_helper_host['https'] );

	// Installing, and reading the status of a site that may not be installed yet, load WordPress
	// as its installer does (no plugins, no theme).
	if ( 'install' === $cloud_helper_command || 'status' === $cloud_helper_command ) {
		define( 'WP_INSTALLING', true );
	}
	if ( 'install' === $cloud_helper_command ) {
		/** No "your new site" mail with a generated password: the owner logs in through autologin. */
		function wp_new_blog_notification( $blog_title, $blog_url, $user_id, $password ) {
		}
	}
	define( 'WP_DISABLE_FATAL_ERROR_HANDLER', true );
	// The helper never spawns WordPress's cron (a loopback HTTP request): page loads do that.
	define( 'DISABLE_WP_CRON', true );
	// Hooks set before WordPress loads (WordPress turns this array into its hooks).
	$wp_filter = array(
		'wp_die_handler' => array(
			PHP_INT_MAX => array(
				array(
					'function'      => static function () {
						return 'cloud_helper_wp_die';
					},
					'accepted_args' => 1,
				),
			),
		),
	);

	$GLOBALS['cloud_helper']['phase'] = 'loading';
	ob_start();
	require $cloud_helper_root . '/public/wp-load.php';
	require_once ABSPATH . 'wp-admin/includes/plugin.php';
	$GLOBALS['cloud_helper']['phase'] = 'running';

	if ( 'install' !== $cloud_helper_command && is_blog_installed() ) {
		$cloud_helper_home = wp_parse_url( get_option( 'home' ) );
		if ( is_array( $cloud_helper_home ) && isset( $cloud_helper_home['host'] ) ) {
			$cloud_helper_https = isset( $cloud_helper_home['scheme'] ) && 'https' === $cloud_helper_home['scheme'];
			cloud_helper_fake_request(
				$cloud_helper_root,
				$cloud_helper_home['host'] . ( isset( $cloud_helper_home['port'] ) ? ':' . $cloud_helper_home['port'] : '' ),
				$cloud_helper_home['host'],
				$cloud_helper_https
			);
		}
	}

	$cloud_helper_result = cloud_helper_run( $cloud_helper_command, $cloud_helper_args, $cloud_helper_root );
	cloud_helper_respond(
		array(
			'ok'     => true,
			'result' => $cloud_helper_result,
		)
	);
} catch ( Cloud_Helper_Error $cloud_helper_error ) {
	cloud_helper_respond( cloud_helper_error_payload( $cloud_helper_error->kind, $cloud_helper_error->getMessage(), $cloud_helper_error->param, $cloud_helper_error->what ) );
} catch ( Throwable $cloud_helper_error ) {
	cloud_helper_respond( cloud_helper_error_payload( 'failed', get_class( $cloud_helper_error ) . ': ' . $cloud_helper_error->getMessage() . ' in ' . $cloud_helper_error->getFile() . ':' . $cloud_helper_error->getLine() ) );
}
exit( 0 );
