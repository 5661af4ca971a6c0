"""The learner's transport: the protocol the step boundary talks to, and the parts of the NATS one."""
