"""The client: ``Client`` (``client``) on its scheduler connection (``connection``),
futures (``futures``), waiting on them (``waiting``), data movement (``data``), the
cluster's workers (``workers``), the default client (``default``) and the event loop
plumbing (``loop``)."""
