import { dbaasHttpSuite } from './dbaas.http.support';

/** The DBaaS endpoints over HTTP on real PostgreSQL instances (test/dbaas.http.support.ts). */
dbaasHttpSuite('postgresql');
