"""What the model can call, apart from who offers it: the tool-provider
interface and the toolbox that runs calls (base.py), the JSON Schema checks
of a tool's arguments (schema.py), and the providers that are not devices
(homeassistant.py). A device that offers tools is a provider through the
device hub (agent/devices/hub.py)."""
