/**
 * The shape of a database or user name the API accepts (DECISIONS "DBaaS"): a lower-case SQL
 * identifier that needs no quoting on either engine. It lives with the providers so that an engine
 * can tell a name the API could have made from one a customer slipped in over SQL (the MariaDB
 * dump passes only such names), and the domain's validation (domain/dbaas/validation.ts) builds on it.
 */
export const DB_NAME_PATTERN = /^[a-z_][a-z0-9_]{0,62}$/;
