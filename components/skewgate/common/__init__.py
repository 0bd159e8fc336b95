"""Shared pieces every step uses: the verdict model, tensor statistics, loaders, errors, MLflow and KFP I/O."""
