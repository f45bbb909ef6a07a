"""Default paths shared by the client commands (agent/cli.py) and the
installer (agent/service/install.py). No imports: `homeagent ask`,
`status`, `say`... need these defaults for their argument parser, and must
not pay for importing the daemon's config (and trio with it) to get them."""

DEFAULT_PATH = "/etc/homeagent/config.toml"
DEFAULT_VENV = "/opt/homeagent"  # where `homeagent install` puts the service's venv
