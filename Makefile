# The two commands of README.md: `make demo` runs the main job, `make test` runs
# every check CI runs. Both install what they need (see scripts/bootstrap.sh).
.PHONY: demo test lint crds e2e-up e2e-down clean image test-kind kind-up kind-down

# `make demo FLINK=real`: the same story on a real Flink 1.20 cluster with RocksDB
# (docs/e2e.md); add FLINK_VERSION=2.2 for Flink 2.2 with ForSt (docs/flink-2.md).
# `make demo KIND=1`: the controller's image in a real pod on a kind cluster built here.
demo:
	bash scripts/demo.sh $(if $(filter real,$(FLINK)),--real$(if $(FLINK_VERSION), --flink $(FLINK_VERSION)),)$(if $(KIND),--kind,)

test:
	bash scripts/test.sh

lint:
	bash scripts/test.sh lint

# Regenerates crds/, the chart's copy of the CRD and docs/api.md from the pydantic model.
crds:
	bash scripts/bootstrap.sh python >/dev/null && .venv/bin/python -m controller.crd --write

e2e-up:
	bash scripts/bootstrap.sh all >/dev/null && .venv/bin/python -m e2e.stack up

e2e-down:
	.venv/bin/python -m e2e.stack down

# The controller image, built with podman without a registry (docs/e2e.md).
image:
	bash e2e/scripts/image.sh

# The kind tier alone (docs/e2e.md); `make test` runs it too.
test-kind:
	bash scripts/bootstrap.sh all >/dev/null && .venv/bin/pytest -p no:cacheprovider e2e/test_kind.py

kind-up:
	bash scripts/bootstrap.sh all >/dev/null && bash e2e/scripts/kind.sh up

kind-down:
	bash e2e/scripts/kind.sh down

clean:
	rm -rf .venv flink-plugin/target
