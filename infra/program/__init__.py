"""What `pulumi up` runs: config model, validation, one module per component, the shared pod template."""
