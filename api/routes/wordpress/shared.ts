import { z } from 'zod';
import { conflict } from '../../../domain/errors';
import type { Principal } from '../../../domain/principal';
import { findTarget } from '../../../domain/services';
import { findVisibleSite, type SiteRow, type SiteTarget } from '../../../domain/wordpress/store';
import type { AppDeps } from '../../deps';
import { idParam } from '../../schemas';

/** What every hosted-site route file shares: the OpenAPI tag, `{id}`, and how a route finds its site. */
export const TAG = 'Hosted sites';

export const siteParams = z.object({ id: idParam('svc_1') });

export const NOT_READY = { status: 409, description: 'The site is still being set up, or its status refuses the change (`conflict`)' };

/**
 * A visible site whose capability holds, built (409 while its order still builds it); `action`
 * names the change, refused on a service whose billing status takes none.
 */
export async function siteTarget(
  deps: AppDeps,
  principal: Principal,
  id: string,
  capability: string,
  action?: string,
): Promise<{ service: SiteTarget['service']; site: SiteRow }> {
  const target = await findTarget(() => findVisibleSite(deps.db, principal, id), { capability, action });
  if (!target.site?.ip) throw conflict('This site is still being set up; try again in a few seconds.');
  return { service: target.service, site: target.site };
}
