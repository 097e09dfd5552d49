#!/usr/bin/env bash
# Hosted WordPress sites (providers/wordpress/): WordPress 6.1 with the two default block themes,
# PHP 8.2 (fpm for the sites, the CLI for the platform's helper, mysql/zip/xml/gd/curl/mbstring for
# WordPress and its plugins), nginx and openssl, from Debian's packages when absent. nginx is
# installed before wordpress so that the `httpd` wordpress depends on is nginx (not apache2). The
# platform runs its own nginx and one php-fpm master per site (providers/wordpress/nginx.ts,
# php-fpm.ts), so the packages' system services must not run: policy-rc.d keeps the install from
# starting them, and they are stopped and disabled if an init system runs them.
set -euo pipefail

. "$(dirname "$0")/lib.sh"

packages=(nginx-light php8.2-fpm php8.2-cli php8.2-mysql php8.2-zip php8.2-xml php8.2-gd php8.2-curl php8.2-mbstring openssl
  wordpress wordpress-theme-twentytwentythree wordpress-theme-twentytwentytwo)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# Any nginx flavour will do.
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
  missing=("${missing[@]/nginx-light/}")
fi
read -r -a missing <<<"${missing[*]}"

if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]} from Debian's packages"
  # The web server first, so that wordpress's `apache2 | httpd` dependency is met by nginx.
  for p in "${missing[@]}"; do if [ "$p" = nginx-light ]; then apt_install nginx-light; fi; done
  apt_install "${missing[@]}"
fi

for service in nginx php8.2-fpm apache2; do disable_service "$service"; done
