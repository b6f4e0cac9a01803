# The two commands of the quick start. Both set up ./.venv on first use.
.PHONY: demo test
demo:
	scripts/dev demo
test:
	scripts/dev test
