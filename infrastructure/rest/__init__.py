"""The REST plumbing every Airlock API shares: the error contract, negotiation, serializers,
and lists (``listing``: filters from the query string, keyset cursors, one page)."""
