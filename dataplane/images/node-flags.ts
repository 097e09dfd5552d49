/**
 * Node flags the delivery plane runs with (`npm run images`, `npm start`, the image's `images`
 * command, the bench). V8 reads them when it makes the heap, so they cannot be set from inside the
 * process, nor through NODE_OPTIONS.
 *
 * `--initial-old-space-size=128`: with V8's default, a small heap (the plane's is about 20 MB) has
 * less room left in its old generation than the young generation could promote, so V8 kept starting
 * full mark-compacts, four or five a second under a stream of misses, each a few ms on the main
 * thread and more on its helper threads. With 128 MB of initial room they come a few times a minute,
 * and a transformation costs the process about 3 ms less CPU (docs/benchmarks.md, "Image delivery").
 * The heap still only grows as far as it is used.
 */
export const IMAGES_NODE_FLAGS: readonly string[] = ['--initial-old-space-size=128'];
