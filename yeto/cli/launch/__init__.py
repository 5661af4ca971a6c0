"""`yeto launch` and `yeto down`, room by room: command.py wires flags -> checks -> plan -> recipe -> LaunchRun."""
