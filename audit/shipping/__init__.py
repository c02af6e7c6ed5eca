"""The audit trail shipped out: every record, in order and at least once, to the configured sinks.

Owns the sink interface (``base.Sink``, what an entry carries), one module
per kind of sink (``syslog``: RFC 5424 over
TCP or TLS; ``http``: Splunk's HTTP Event Collector and JSON lines;
``stdout``: JSON lines for a container's log collector) and the shipping
pass with the sinks ``AUDIT_SINKS`` names, each one's position and lag
(``ship``).

The chain is its own outbox: every record is written in the transaction of
the change it tells of, with a contiguous sequence number committed in
order, so a sink's position is the last number it acknowledged and nothing
else needs writing on the hot path. Sinks never import each other. May
import the audit app's models and ``checkpoints``, and ``infrastructure``.
"""
