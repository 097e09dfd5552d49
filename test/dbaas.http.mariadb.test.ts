import { dbaasHttpSuite } from './dbaas.http.support';

/** The DBaaS endpoints over HTTP on real MariaDB instances (test/dbaas.http.support.ts). */
dbaasHttpSuite('mysql');
