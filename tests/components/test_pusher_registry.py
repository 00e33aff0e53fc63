"""Model Registry upload through the real google-cloud-aiplatform SDK, faked only at its API clients
(the last layer before gRPC): the request protos the SDK would send are checked field by field."""

import dataclasses
import json

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1.services.endpoint_service import EndpointServiceClient
from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient
from google.cloud.aiplatform_v1.types import (
    endpoint as gca_endpoint,
    endpoint_service,
    model as gca_model,
    model_service,
)

from rlops.components.json_config import ConfigValueError
from rlops.components.pusher import registry

PROJECT, REGION = "proj", "us-central1"
MODEL = f"projects/{PROJECT}/locations/{REGION}/models/123"
ENDPOINT = f"projects/{PROJECT}/locations/{REGION}/endpoints/456"


class FakeLRO:
    def __init__(self, result):
        self._result = result
        self.operation = type("Op", (), {"name": "operations/1"})()

    def result(self, timeout=None):
        return self._result


class FakeVertex:
    """Registry and endpoint state behind the fake API clients: versions with aliases, deployments."""

    def __init__(self):
        self.versions: dict[str, gca_model.Model] = {}
        self.upload_requests, self.deploy_requests = [], []
        self.endpoint = gca_endpoint.Endpoint(
            name=ENDPOINT,
            display_name="policy-endpoint",
            deployed_models=[gca_endpoint.DeployedModel(id="old", model=MODEL)],
            traffic_split={"old": 100},
        )

    def upload_model(self, client, request=None, **_):
        self.upload_requests.append(request)
        version_id = str(len(self.versions) + 1)
        for other in self.versions.values():  # Vertex: an alias lives on one version at a time
            other.version_aliases = [a for a in other.version_aliases if a not in request.model.version_aliases]
        model = gca_model.Model(request.model)
        model.name, model.version_id = MODEL, version_id
        model.supported_deployment_resources_types = [  # what Vertex reports for a custom-container model
            gca_model.Model.DeploymentResourcesType.DEDICATED_RESOURCES
        ]
        self.versions[version_id] = model
        return FakeLRO(model_service.UploadModelResponse(model=MODEL, model_version_id=version_id))

    def get_model(self, client, request=None, name=None, **_):
        name = name or request.name
        version = name.split("@")[1] if "@" in name else max(self.versions)
        return self.versions[version]

    def get_endpoint(self, client, request=None, name=None, **_):
        return self.endpoint

    def deploy_model(self, client, request=None, endpoint=None, deployed_model=None, traffic_split=None, **_):
        if request is None:  # flattened arguments: the request the real client would build from them
            request = endpoint_service.DeployModelRequest(
                endpoint=endpoint, deployed_model=deployed_model, traffic_split=traffic_split
            )
        self.deploy_requests.append(request)
        new = gca_endpoint.DeployedModel(request.deployed_model)
        new.id = "new"
        self.endpoint.deployed_models.append(new)
        split = dict(request.traffic_split)
        split["new"] = split.pop("0")
        self.endpoint.traffic_split = split
        return FakeLRO(endpoint_service.DeployModelResponse(deployed_model=new))


@pytest.fixture
def vertex(monkeypatch):
    import google.auth

    monkeypatch.setattr(google.auth, "default", lambda *a, **k: (AnonymousCredentials(), PROJECT))  # no ADC here
    fake = FakeVertex()
    for cls, names in (
        (ModelServiceClient, ("upload_model", "get_model")),
        (EndpointServiceClient, ("get_endpoint", "deploy_model")),
    ):
        for name in names:
            method = getattr(fake, name)
            monkeypatch.setattr(cls, name, lambda self, *a, _m=method, **k: _m(self, *a, **k))
    return fake


def test_upload_moves_champion_to_the_new_version_with_the_prebuilt_tf_container(vertex):
    config = registry.RegistryConfig(
        project=PROJECT,
        region=REGION,
        display_name="digits-policy",
        parent_model="123",
        labels={"pipeline": "rlops-bandit"},
    )
    first = registry.upload_version(
        "gs://b/serving/1795555600", config, {"training_run": "r1"}, credentials=AnonymousCredentials()
    )
    second = registry.upload_version(
        "gs://b/serving/1795555601", config, {"training_run": "r2"}, credentials=AnonymousCredentials()
    )
    sent = vertex.upload_requests[-1]
    assert sent.parent == f"projects/{PROJECT}/locations/{REGION}"
    assert sent.parent_model == MODEL  # a new version of the same model
    assert sent.model.artifact_uri == "gs://b/serving/1795555601"
    assert sent.model.container_spec.image_uri == "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
    assert "champion" in sent.model.version_aliases and "default" in sent.model.version_aliases
    assert '"training_run": "r2"' in sent.model.version_description
    assert dict(sent.model.labels) == {"pipeline": "rlops-bandit"}
    assert (first["version_id"], second["versioned_name"]) == ("1", f"{MODEL}@2")
    assert "champion" not in vertex.versions["1"].version_aliases and "champion" in vertex.versions["2"].version_aliases


def test_deploy_gives_the_new_version_its_traffic_share(vertex):
    config = registry.RegistryConfig(
        project=PROJECT,
        region=REGION,
        display_name="digits-policy",
        endpoint="456",
        traffic_percentage=10,
        machine_type="n1-standard-4",
    )
    out = registry.upload_version("gs://b/serving/7", config, credentials=AnonymousCredentials())
    sent = vertex.deploy_requests[-1]
    assert sent.endpoint == ENDPOINT and sent.deployed_model.model == f"{MODEL}@1"
    assert sent.deployed_model.dedicated_resources.machine_spec.machine_type == "n1-standard-4"
    assert dict(sent.traffic_split) == {"0": 10, "old": 90}  # canary: the rest stays on the old one
    assert out["endpoint"] == ENDPOINT and out["traffic_split"] == {"new": 10, "old": 90}


@pytest.mark.parametrize(
    "values,match",
    [
        ({"project": "p", "region": "r", "display_name": "d", "traffic_percentage": 150}, "traffic_percentage"),
        ({"project": "p", "region": "r", "display_name": "d", "alias": "Champion!"}, "alias"),
        ({"project": "", "region": "r", "display_name": "d"}, "needs project"),
        ({"project": "p", "region": "r", "display_name": "d", "endpint": "1"}, "vertex_upload.endpint: unknown key"),
    ],
)
def test_registry_config_errors_name_the_field(values, match):
    with pytest.raises(ValueError, match=match):
        registry.RegistryConfig.from_dict(values)


def test_local_artifact_uri_is_refused():
    config = registry.RegistryConfig(project=PROJECT, region=REGION, display_name="d")
    with pytest.raises(ValueError, match="gs://"):
        registry.upload_kwargs("/local/serving/1", config)


# Every key a pipeline YAML's pusher.vertex_upload (or the components' JSON) could hold before the
# section moved onto json_config's loader: each still reads the same.
EVERY_KEY = {
    "project": "p",
    "region": "us-central1",
    "display_name": "digits-policy",
    "parent_model": "projects/p/locations/us-central1/models/123",
    "alias": "champion-2",
    "serving_container_image_uri": "us-docker.pkg.dev/x/y:latest",
    "tf_version": "2.14",
    "labels": {"pipeline": "rlops-bandit"},
    "endpoint": "456",
    "traffic_percentage": 10,
    "machine_type": "n1-standard-4",
    "min_replica_count": 1,
    "max_replica_count": 3,
}


def test_every_key_users_write_reads_the_same_and_round_trips():
    config = registry.RegistryConfig.from_json(json.dumps(EVERY_KEY))
    assert dataclasses.asdict(config) == EVERY_KEY
    assert registry.RegistryConfig.from_json(config.to_json()) == config
    minimal = registry.RegistryConfig.from_dict({"project": "p", "region": "r", "display_name": "d"})
    assert (minimal.alias, minimal.labels, minimal.endpoint, minimal.traffic_percentage) == ("champion", {}, None, 100)


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("endpint", "1", "vertex_upload.endpint: unknown key; closest: endpoint"),
        ("traffic_percentage", "10", "vertex_upload.traffic_percentage: expected an integer, got '10' (str)"),
        ("labels", {"team": 7}, "vertex_upload.labels.team: expected a string, got 7 (int)"),
        ("parent_model", 123, "vertex_upload.parent_model: expected a string, got 123 (int)"),
    ],
)
def test_unknown_key_or_wrong_type_is_one_line_naming_the_key_path(key, value, message):
    raw = json.dumps({"project": "p", "region": "r", "display_name": "d", key: value})
    with pytest.raises(ConfigValueError) as e:
        registry.RegistryConfig.from_json(raw)
    assert str(e.value) == message  # one line: the key path, the problem, the closest names


def test_pusher_component_refuses_an_unknown_vertex_upload_key_at_definition():
    from tfx.types import channel_utils, standard_artifacts

    from rlops.components.pusher.component import Pusher

    model = channel_utils.as_channel([standard_artifacts.Model()])
    blessing = channel_utils.as_channel([standard_artifacts.ModelBlessing()])
    bad = json.dumps({"project": "p", "region": "r", "display_name": "d", "machine_typ": "n1-standard-4"})
    with pytest.raises(ValueError) as e:
        Pusher(model=model, model_blessing=blessing, push_destination="/tmp/x", vertex_upload=bad)
    assert str(e.value) == "vertex_upload.machine_typ: unknown key; closest: machine_type"
