"""The wire protocol: frames and handshakes (``comm``), run specs (``specs``), the
``update-graph`` encoding (``update_graph``), requests to workers' peer listeners
(``peers``) and how task errors travel (``remote_errors``)."""
