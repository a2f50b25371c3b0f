"""docker/compose.yaml offers nothing to the network: every port on 127.0.0.1, Ray's token authentication
on, no password written in the file."""

from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parents[1] / "docker" / "compose.yaml"


def test_compose_binds_to_loopback_and_keeps_authentication_on():
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    ports = [p for s in services.values() for p in s.get("ports", [])]
    assert ports and all(str(p).startswith("127.0.0.1:") for p in ports)
    for name, service in services.items():
        env = service.get("environment", {})
        if name.startswith("ray"):
            assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN"].startswith("${RAY_AUTH_TOKEN:?")
        if "POSTGRES_PASSWORD" in env:
            assert env["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
