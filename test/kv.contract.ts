import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { KvNameError, type KvStore } from '../providers/kv.provider';

/**
 * The behaviour every KvStore shares, run against Redis (test/redis.kv.real.test.ts) and the
 * PostgreSQL fallback (test/kv.simulator.test.ts), so KV_BACKEND=simulator answers like production.
 * Each test takes tenants of its own, so they run against one store per file.
 */
export function describeKvContract(name: string, store: () => KvStore): void {
  /** A tenant handle no other test of the run uses, made ready. */
  const tenant = async (): Promise<string> => {
    const handle = `t${randomBytes(8).toString('hex')}`;
    await store().ensureTenant(handle);
    return handle;
  };
  const b = (text: string) => Buffer.from(text);
  /** The byte-count formula, written out once more on the test's side. */
  const bytes = (ns: string, key: Buffer, value: Buffer) => ns.length + 1 + key.length + value.length;

  describe(`kv contract: ${name}`, () => {
    it('round-trips binary keys and values, and a missing key is null', async () => {
      const t = await tenant();
      const key = Buffer.from([0x00, 0xff, 0x3a, 0x2a, 0x0a, 0x5b]); // NUL, 0xff, ':', '*', newline, '['
      const value = randomBytes(4096);
      await store().put(t, 'app', key, value);
      expect(await store().get(t, 'app', key)).toEqual(value);
      expect(await store().get(t, 'app', b('absent'))).toBeNull();
      // An empty value is a value, not an absent key.
      await store().put(t, 'app', b('empty'), Buffer.alloc(0));
      expect(await store().get(t, 'app', b('empty'))).toEqual(Buffer.alloc(0));
      // Keys of the longest length.
      const longest = randomBytes(512);
      await store().put(t, 'app', longest, b('x'));
      expect(await store().get(t, 'app', longest)).toEqual(b('x'));
    });

    it('deletes a key, and deleting a missing key changes nothing', async () => {
      const t = await tenant();
      await store().put(t, 'app', b('k'), b('v'));
      expect(await store().delete(t, 'app', b('k'))).toBe(0);
      expect(await store().get(t, 'app', b('k'))).toBeNull();
      expect(await store().delete(t, 'app', b('k'))).toBe(0);
      await store().put(t, 'app', b('kept'), b('value'));
      expect(await store().delete(t, 'app', b('never'))).toBe(bytes('app', b('kept'), b('value')));
    });

    it('keeps the stored bytes exact through puts, overwrites and deletes', async () => {
      const t = await tenant();
      expect(await store().storedBytes(t)).toBe(0);
      const k1 = b('first');
      const k2 = randomBytes(33);
      let expected = bytes('app', k1, b('hello'));
      expect(await store().put(t, 'app', k1, b('hello'))).toBe(expected);
      expected += bytes('other-ns', k2, randomBytes(100));
      expect(await store().put(t, 'other-ns', k2, randomBytes(100))).toBe(expected);
      // Overwrites count the new value's length only.
      expected += 1000 - 5;
      expect(await store().put(t, 'app', k1, randomBytes(1000))).toBe(expected);
      expected -= 1000;
      expect(await store().put(t, 'app', k1, Buffer.alloc(0))).toBe(expected);
      expect(await store().storedBytes(t)).toBe(expected);
      expected -= bytes('app', k1, Buffer.alloc(0));
      expect(await store().delete(t, 'app', k1)).toBe(expected);
      expect(await store().delete(t, 'other-ns', k2)).toBe(0);
      expect(await store().storedBytes(t)).toBe(0);
    });

    it('keeps the count exact under concurrent writes to the same keys', async () => {
      const t = await tenant();
      const keys = [b('a'), b('b'), b('c')];
      const sizes = [0, 7, 300, 64, 1];
      await Promise.all(Array.from({ length: 60 }, (_, i) => store().put(t, 'app', keys[i % 3], randomBytes(sizes[i % sizes.length]))));
      await Promise.all(Array.from({ length: 10 }, (_, i) => store().delete(t, 'app', keys[i % 2])));
      const left = await store().get(t, 'app', keys[2]);
      expect(await store().storedBytes(t)).toBe(bytes('app', keys[2], left!));
    });

    it('keeps namespaces apart', async () => {
      const t = await tenant();
      await store().put(t, 'one', b('k'), b('in one'));
      await store().put(t, 'two', b('k'), b('in two'));
      // `one:k` in namespace `one` must not be the key `k` of a namespace `one:` or the like.
      await store().put(t, 'one', b('two:k'), b('nested'));
      expect(await store().get(t, 'one', b('k'))).toEqual(b('in one'));
      expect(await store().get(t, 'two', b('k'))).toEqual(b('in two'));
      await store().delete(t, 'one', b('k'));
      expect(await store().get(t, 'two', b('k'))).toEqual(b('in two'));
      expect(await store().get(t, 'one', b('two:k'))).toEqual(b('nested'));
    });

    it('keeps tenants apart: the same namespace and key under two tenants', async () => {
      const [a, c] = [await tenant(), await tenant()];
      await store().put(a, 'app', b('shared'), b('of a'));
      expect(await store().get(c, 'app', b('shared'))).toBeNull();
      await store().put(c, 'app', b('shared'), b('of c!'));
      expect(await store().get(a, 'app', b('shared'))).toEqual(b('of a'));
      expect(await store().storedBytes(a)).toBe(bytes('app', b('shared'), b('of a')));
      expect(await store().storedBytes(c)).toBe(bytes('app', b('shared'), b('of c!')));
      await store().delete(c, 'app', b('shared'));
      expect(await store().get(a, 'app', b('shared'))).toEqual(b('of a'));
    });

    it('does not let a tenant handle that is a prefix of another reach its keys', async () => {
      const base = `p${randomBytes(4).toString('hex')}`;
      const [short, long] = [base, `${base}1`];
      await store().ensureTenant(short);
      await store().ensureTenant(long);
      await store().put(long, 'app', b('k'), b('long'));
      await store().put(short, 'app', b('k'), b('short'));
      await store().dropTenant(short);
      expect(await store().get(long, 'app', b('k'))).toEqual(b('long'));
      expect(await store().storedBytes(long)).toBe(bytes('app', b('k'), b('long')));
      await store().dropTenant(long);
    });

    it('refuses bad tenant and namespace names and key lengths', async () => {
      const t = await tenant();
      const badTenants = ['', 'A', 'a-b', 'a:b', 'a*', 'x'.repeat(33), 'a b', '../a'];
      for (const bad of badTenants) {
        await expect(store().ensureTenant(bad), bad).rejects.toBeInstanceOf(KvNameError);
        await expect(store().get(bad, 'app', b('k')), bad).rejects.toBeInstanceOf(KvNameError);
        await expect(store().put(bad, 'app', b('k'), b('v')), bad).rejects.toBeInstanceOf(KvNameError);
        await expect(store().storedBytes(bad), bad).rejects.toBeInstanceOf(KvNameError);
        await expect(store().dropTenant(bad), bad).rejects.toBeInstanceOf(KvNameError);
      }
      const badNamespaces = ['', '-a', 'A', 'a:b', 'a*', 'a_b', 'x'.repeat(64), 'ü'];
      for (const bad of badNamespaces) {
        await expect(store().get(t, bad, b('k')), bad).rejects.toBeInstanceOf(KvNameError);
        await expect(store().put(t, bad, b('k'), b('v')), bad).rejects.toBeInstanceOf(KvNameError);
        await expect(store().delete(t, bad, b('k')), bad).rejects.toBeInstanceOf(KvNameError);
      }
      await expect(store().put(t, 'app', Buffer.alloc(0), b('v'))).rejects.toBeInstanceOf(KvNameError);
      await expect(store().put(t, 'app', Buffer.alloc(513), b('v'))).rejects.toBeInstanceOf(KvNameError);
      await expect(store().get(t, 'app', Buffer.alloc(513))).rejects.toBeInstanceOf(KvNameError);
      expect(await store().storedBytes(t)).toBe(0);
    });

    it('drops every entry of one tenant and only of that tenant', async () => {
      const [gone, kept] = [await tenant(), await tenant()];
      for (let i = 0; i < 1200; i += 200) {
        await Promise.all(Array.from({ length: 200 }, (_, j) => store().put(gone, j % 2 ? 'app' : 'cache', b(`key-${i + j}`), b('v'))));
      }
      await store().put(kept, 'app', b('key-1'), b('stays'));
      await store().dropTenant(gone);
      expect(await store().storedBytes(gone)).toBe(0);
      expect(await store().storedBytes(kept)).toBe(bytes('app', b('key-1'), b('stays')));
      expect(await store().get(kept, 'app', b('key-1'))).toEqual(b('stays'));
      // Dropping again (an interrupted termination retried) is fine.
      await store().dropTenant(gone);
      // A tenant made again starts empty.
      await store().ensureTenant(gone);
      expect(await store().get(gone, 'cache', b('key-0'))).toBeNull();
      expect(await store().storedBytes(gone)).toBe(0);
    });
  });
}
