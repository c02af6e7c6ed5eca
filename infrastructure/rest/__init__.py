"""The REST plumbing every Airlock API shares: the error contract, negotiation, serializers."""
