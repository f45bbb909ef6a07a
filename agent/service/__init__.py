"""The service shell: configuration, systemd integration (sd_notify, socket
activation, watchdog), logging, and the daemon that wires the layers together."""
