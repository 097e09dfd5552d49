import { Model } from 'objection';

/**
 * Objection models of the core tables. Columns are snake_case in the database and in the models,
 * matching the JSON the API speaks; presenters (domain/*) turn rows into public resources.
 */
export class AccountModel extends Model {
  static override tableName = 'accounts';
  id!: number;
  name!: string | null;
  company!: string | null;
  email!: string | null;
  country!: string | null;
  status!: string;
  currency!: string;
  created_at!: Date;
}

export class UserModel extends Model {
  static override tableName = 'users';
  id!: number;
  account_id!: number;
  email!: string;
  password_hash!: string;
  is_owner!: boolean;
  scopes!: string[];
  all_services!: boolean;
  created_at!: Date;
}

export class SessionModel extends Model {
  static override tableName = 'sessions';
  id!: number;
  token_hash!: string;
  user_id!: number;
  account_id!: number;
  expires_at!: Date;
  ended_at!: Date | null;
  created_at!: Date;
}

export class ApiKeyModel extends Model {
  static override tableName = 'api_keys';
  id!: number;
  account_id!: number;
  user_id!: number;
  name!: string;
  token_hash!: string;
  token_prefix!: string;
  token_last4!: string;
  scopes!: string[];
  service_allowlist!: number[];
  rate_limit_tier!: string | null;
  last_used_at!: Date | null;
  expires_at!: Date | null;
  revoked_at!: Date | null;
  created_at!: Date;
}

export class ServiceModel extends Model {
  static override tableName = 'services';
  id!: number;
  account_id!: number;
  family!: string;
  product!: string | null;
  status!: string;
  name!: string | null;
  label!: string | null;
  primary_ip!: string | null;
  billing_cycle!: string | null;
  next_due_date!: string | Date | null;
  capabilities!: Record<string, boolean>;
  created_at!: Date;
  updated_at!: Date;
}

export class OperationModel extends Model {
  static override tableName = 'operations';
  id!: string;
  account_id!: number;
  type!: string;
  status!: string;
  progress!: number | null;
  resource_object!: string | null;
  resource_id!: string | null;
  service_id!: number | null;
  result!: unknown;
  error!: unknown;
  credential_id!: string | null;
  created_at!: Date;
  updated_at!: Date;
  completed_at!: Date | null;
}

export class AuditLogModel extends Model {
  static override tableName = 'audit_logs';
  id!: number;
  request_id!: string;
  account_id!: number | null;
  method!: string;
  path!: string;
  route!: string | null;
  status!: number;
  error_code!: string | null;
  scope_required!: string | null;
  credential_id!: string | null;
  ip!: string | null;
  via!: string | null;
  duration_ms!: number | null;
  created_at!: Date;
}

export class EventModel extends Model {
  static override tableName = 'events';
  id!: string;
  account_id!: number;
  type!: string;
  data!: unknown;
  created_at!: Date;
  dispatched_at!: Date | null;
}
