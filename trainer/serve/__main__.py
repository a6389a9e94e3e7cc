"""``python -m trainer.serve``: see :mod:`trainer.serve.cli`."""

from trainer.serve.cli import run_as_process

if __name__ == "__main__":
    run_as_process()
