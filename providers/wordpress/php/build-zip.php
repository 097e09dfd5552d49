<?php
/**
 * Builds a plugin zip for the platform's local plugin directory (providers/wordpress/plugin-directory.ts):
 * reads ONE JSON object on stdin, {source, top, out}, and writes `out`, a zip whose entries are the
 * files of the directory `source` under the top folder `top`. Symbolic links are followed for
 * files inside `source` only when they resolve to regular files; anything else is skipped.
 * Answers ONE JSON object on stdout: {ok: true, entries} or {ok: false, error}.
 */

if ( PHP_SAPI !== 'cli' ) {
	exit( 1 );
}
ini_set( 'display_errors', 'stderr' );

function build_zip_answer( array $payload, $code ) {
	fwrite( STDOUT, json_encode( $payload, JSON_UNESCAPED_SLASHES ) . "\n" );
	exit( $code );
}

$request = json_decode( (string) stream_get_contents( STDIN, 65536 ), true );
if ( ! is_array( $request ) || ! isset( $request['source'], $request['top'], $request['out'] )
	|| ! is_string( $request['source'] ) || ! is_string( $request['top'] ) || ! is_string( $request['out'] )
	|| ! preg_match( '/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/', $request['top'] ) ) {
	build_zip_answer( array( 'ok' => false, 'error' => 'expected {source, top, out}' ), 2 );
}
$source = realpath( $request['source'] );
if ( false === $source || ! is_dir( $source ) ) {
	build_zip_answer( array( 'ok' => false, 'error' => 'source is not a directory' ), 2 );
}

$zip = new ZipArchive();
if ( true !== $zip->open( $request['out'], ZipArchive::CREATE | ZipArchive::EXCL ) ) {
	build_zip_answer( array( 'ok' => false, 'error' => 'cannot create the zip' ), 1 );
}
$top     = $request['top'];
$entries = 0;
$zip->addEmptyDir( $top );
$zip->setExternalAttributesName( $top . '/', ZipArchive::OPSYS_UNIX, ( 040755 << 16 ) );
$iterator = new RecursiveIteratorIterator(
	new RecursiveDirectoryIterator( $source, FilesystemIterator::SKIP_DOTS ),
	RecursiveIteratorIterator::SELF_FIRST
);
$files = array();
foreach ( $iterator as $path => $info ) {
	$files[] = array( $path, $info->isDir(), $info->isFile() );
}
sort( $files );
foreach ( $files as list( $path, $is_dir, $is_file ) ) {
	$name = $top . '/' . substr( $path, strlen( $source ) + 1 );
	if ( $is_dir ) {
		$zip->addEmptyDir( $name );
		$zip->setExternalAttributesName( $name . '/', ZipArchive::OPSYS_UNIX, ( 040755 << 16 ) );
	} elseif ( $is_file ) {
		$zip->addFile( $path, $name );
		$zip->setExternalAttributesName( $name, ZipArchive::OPSYS_UNIX, ( 0100644 << 16 ) );
	} else {
		continue;
	}
	$entries++;
}
if ( ! $zip->close() ) {
	build_zip_answer( array( 'ok' => false, 'error' => 'cannot write the zip' ), 1 );
}
build_zip_answer( array( 'ok' => true, 'entries' => $entries ), 0 );
