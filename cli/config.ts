import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';

/**
 * Profiles in `$XDG_CONFIG_HOME/cloud/config.json` (default `~/.config/cloud/config.json`). The file
 * holds tokens, so it is written with mode 0600 (its folder 0700) and replaced atomically.
 */
export interface Profile {
  api_url: string;
  token?: string;
  token_type?: 'session' | 'api_key';
  email?: string;
  expires_at?: string | null;
}

export interface ConfigFile {
  active: string;
  profiles: Record<string, Profile>;
}

export const DEFAULT_API_URL = 'http://127.0.0.1:3000';

export function configPath(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CONFIG_HOME && path.isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : path.join(homedir(), '.config');
  return path.join(base, 'cloud', 'config.json');
}

export function readConfig(file = configPath()): ConfigFile {
  if (!existsSync(file)) return { active: 'default', profiles: {} };
  const parsed = JSON.parse(readFileSync(file, 'utf8')) as Partial<ConfigFile>;
  return { active: parsed.active ?? 'default', profiles: parsed.profiles ?? {} };
}

export function writeConfig(config: ConfigFile, file = configPath()): void {
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
}

export interface GlobalOptions {
  apiUrl?: string;
  token?: string;
  profile?: string;
  output?: string;
}

export interface Resolved {
  apiUrl: string;
  token: string | null;
  profileName: string;
  profile: Profile | undefined;
  /** Where the token came from, for messages (`--token`, `CLOUD_TOKEN`, `profile default`). */
  tokenSource: string | null;
}

/** DECISIONS "CLI": `--token`, else `CLOUD_TOKEN`, else the profile; `--api-url`, else `CLOUD_API_URL`, else the profile, else the default. */
export function resolveSettings(opts: GlobalOptions, env: NodeJS.ProcessEnv = process.env): Resolved {
  const config = readConfig(configPath(env));
  const profileName = opts.profile ?? env.CLOUD_PROFILE ?? config.active;
  const profile = config.profiles[profileName];
  const apiUrl = opts.apiUrl ?? env.CLOUD_API_URL ?? profile?.api_url ?? DEFAULT_API_URL;
  if (opts.token) return { apiUrl, token: opts.token, profileName, profile, tokenSource: '--token' };
  if (env.CLOUD_TOKEN) return { apiUrl, token: env.CLOUD_TOKEN, profileName, profile, tokenSource: 'CLOUD_TOKEN' };
  if (profile?.token) return { apiUrl, token: profile.token, profileName, profile, tokenSource: `profile ${profileName}` };
  return { apiUrl, token: null, profileName, profile, tokenSource: null };
}
