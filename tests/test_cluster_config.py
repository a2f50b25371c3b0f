"""cluster.yaml is validated against the cluster-config JSON schema that ships inside Ray."""

import json
from pathlib import Path

import jsonschema
import ray
import yaml

from tests.conftest import REPO


def test_cluster_yaml_matches_rays_schema():
    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    config = yaml.safe_load((REPO / "cluster.yaml").read_text())
    jsonschema.validate(config, schema)
    assert set(config["available_node_types"]) == {"head", "cpu_worker", "gpu_worker"}
    assert config["available_node_types"]["gpu_worker"]["resources"]["GPU"] == 1
