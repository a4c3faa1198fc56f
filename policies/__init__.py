"""DS2 and Justin as pure functions: no kopf, kubernetes, Prometheus or network imports."""
