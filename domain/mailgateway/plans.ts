/**
 * What a mail gateway plan includes each UTC month (SPEC leaves the numbers "not shown";
 * docs/mailgateway.md lists them): accepted sends up to the limit, then `/emails` answers
 * `429 quota_exceeded` until the month ends.
 */
export const MAIL_PLANS: Record<string, { monthly_limit: number }> = {
  'mailgateway-10k': { monthly_limit: 10_000 },
};

export function monthlyLimitOf(plan: string): number {
  return (MAIL_PLANS[plan] ?? MAIL_PLANS['mailgateway-10k']).monthly_limit;
}
