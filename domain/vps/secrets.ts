/** Keyring purpose of a reinstall's sealed root password (sealed by the API, opened by the activity). */
export const ROOT_PASSWORD_PURPOSE = 'vps-root-password';
