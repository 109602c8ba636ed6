"""The read side (DESIGN §8): humans read the ledger through the views (migrations 0004,
0007, 0012): Grafana through a read-only PostgreSQL role (`roles`), an operator through
`work-ledger report` (`report`), Prometheus through /metrics (`gauges`), all from the read
pool (`pool`). Everything here reads views, never tables, so it shows what those readers see.
"""
