<?php
/**
 * Plugin Name: Cloud Hello
 * Description: A small plugin of the platform's local plugin directory: front-end answers carry an X-Cloud-Hello header with its version, and an hourly cron event counts its runs.
 * Version: 1.1.0
 * Requires at least: 6.0
 * Requires PHP: 7.4
 * License: GPLv2 or later
 * Text Domain: cloud-hello
 */

if ( ! defined( 'ABSPATH' ) ) {
	exit;
}

const CLOUD_HELLO_VERSION = '1.1.0';

/** Front-end answers say which version runs. */
add_action(
	'send_headers',
	static function () {
		header( 'X-Cloud-Hello: ' . CLOUD_HELLO_VERSION );
	}
);

add_action(
	'wp_head',
	static function () {
		echo '<meta name="cloud-hello" content="' . esc_attr( CLOUD_HELLO_VERSION ) . '">' . "\n";
	}
);

/** The hourly event counts its runs in the option cloud_hello_ticks. */
add_action(
	'cloud_hello_tick',
	static function () {
		update_option( 'cloud_hello_ticks', (int) get_option( 'cloud_hello_ticks', 0 ) + 1 );
	}
);

register_activation_hook(
	__FILE__,
	static function () {
		if ( ! wp_next_scheduled( 'cloud_hello_tick' ) ) {
			wp_schedule_event( time() + HOUR_IN_SECONDS, 'hourly', 'cloud_hello_tick' );
		}
	}
);

register_deactivation_hook(
	__FILE__,
	static function () {
		wp_clear_scheduled_hook( 'cloud_hello_tick' );
	}
);
