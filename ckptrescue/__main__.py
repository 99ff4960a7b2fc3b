"""``python -m ckptrescue`` runs the CLI."""

from ckptrescue.cli.process import main

if __name__ == "__main__":
    main()
