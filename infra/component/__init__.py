"""The project as a Pulumi component package, `ddp-mnist`: TrainingPlatform and TrainingJob.

- `resources.py`: the components, built by the stacks' own code (`infra.program.stack.build`).
- `inputs.py`: their inputs read as a stack's config (same keys, defaults and errors).
- `schema.py`: the package schema, generated into `schema.json` (`python -m infra.component.schema`).
- `provider.py` and `__main__.py`: the provider the Pulumi engine runs (`PulumiPlugin.yaml`).
"""
