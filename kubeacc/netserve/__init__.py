"""Bounded HTTP serving for every port kube-acc opens (extender, metrics and probe ports).

:class:`~kubeacc.netserve.server.BoundedHTTPServer` caps connections, time (a deadline per
phase of a connection) and bytes (request head, request body); :mod:`kubeacc.netserve.tls`
builds the server side of mutual TLS. docs/security.md, "Ports", says why the standard
library's server with these bounds rather than a framework.
"""
