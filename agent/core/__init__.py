"""The center of the daemon: the answer vocabulary (replies.py), who asked
and the commands every door builds (commands.py), the one ask lifecycle and
its listeners (center.py), what devices receive (deliveries.py), the
masking edge (edge.py), the counters (statistics.py), and the accept loop
every listening door shares (accept.py)."""
