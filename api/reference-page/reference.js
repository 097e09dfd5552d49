/* global window, document, fetch, SwaggerUIBundle */
'use strict';

// The reference page: Swagger UI over the served OpenAPI document. Before rendering, each operation's
// summary and description are given the scope it needs and its marks, which the document carries as
// the security requirement and the x-cloud-* extensions.
(function () {
  var MARKS = { R: 'reversible', D: 'destructive', A: 'asynchronous: answers 202 with an operation', I: 'idempotent' };
  var METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

  function access(op) {
    var scope = op['x-cloud-scope'];
    var credential = op['x-cloud-credential'];
    var parts = [scope || (credential === 'none' ? 'public' : 'any credential')];
    if (credential === 'session') parts.push('session only');
    var marks = op['x-cloud-marks'] || [];
    if (marks.length) parts.push(marks.join(' '));
    return parts.join(' · ');
  }

  function decorate(spec) {
    Object.keys(spec.paths || {}).forEach(function (path) {
      var item = spec.paths[path];
      METHODS.forEach(function (method) {
        var op = item[method];
        if (!op) return;
        var scope = op['x-cloud-scope'];
        var credential = op['x-cloud-credential'];
        var marks = op['x-cloud-marks'] || [];
        var lines = [
          '**Scope:** ' +
            (scope ? '`' + scope + '`' : credential === 'none' ? 'none (public)' : 'none (any valid credential)') +
            (credential === 'session' ? ' · **session credentials only**' : ''),
          '**Marks:** ' +
            (marks.length
              ? marks
                  .map(function (m) {
                    return '**' + m + '** (' + MARKS[m] + ')';
                  })
                  .join(', ')
              : 'none'),
        ];
        op.summary = (op.summary || '') + '  [' + access(op) + ']';
        op.description = lines.join('  \n') + (op.description ? '\n\n' + op.description : '');
      });
    });
    return spec;
  }

  function fail(message) {
    var box = document.getElementById('swagger-ui');
    box.textContent = 'The API document could not be loaded: ' + message;
  }

  fetch('/v1/openapi.json', { headers: { accept: 'application/json' } })
    .then(function (res) {
      if (!res.ok) throw new Error('HTTP ' + res.status);
      return res.json();
    })
    .then(function (spec) {
      window.ui = SwaggerUIBundle({
        spec: decorate(spec),
        dom_id: '#swagger-ui',
        deepLinking: true,
        // Tags start collapsed: Swagger UI 5 stops rendering once about 130 operations are open at
        // once (measured with this API's 145), and one tag at a time stays quick.
        docExpansion: 'none',
        defaultModelsExpandDepth: 0,
        showExtensions: true,
        displayOperationId: true,
        validatorUrl: null,
        persistAuthorization: false,
        presets: [SwaggerUIBundle.presets.apis],
        layout: 'BaseLayout',
      });
    })
    .catch(function (err) {
      fail(err.message);
    });
})();
