import type { Knex } from 'knex';

/**
 * The deployment a `caas.deploy` request claims (`inTransaction`): a `pending` row, of which an app
 * holds one at a time (a partial unique index). Given back, when no workflow ran the operation to
 * its end, by failing it and the app with it where nothing else serves.
 */
export async function releaseDeployment(trx: Knex.Transaction, operationId: string): Promise<void> {
  const rows: Array<{ id: string; app_id: string }> = await trx('caas_deployments')
    .where({ operation_id: operationId })
    .whereIn('status', ['pending', 'building', 'starting'])
    .update({ status: 'failed', error_code: 'interrupted', error_message: 'the deployment was interrupted before it completed', finished_at: trx.fn.now() })
    .returning(['id', 'app_id']);
  for (const row of rows) {
    await trx('caas_apps').where({ id: row.app_id }).whereNull('current_deployment_id').update({ status: 'failed', updated_at: trx.fn.now() });
  }
}
