"""The trainer's arguments as the tests give them (unit and real alike): a tiny run, argv parsed by the real
parser, and what a written plot starts with."""

from train import cli

TINY = ["--env", "BasicEnv", "--train-batch-size", "200", "--fcnet-hiddens", "16", "--seed", "1"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def parse_train(argv, environ=None):
    """argv -> TrainOptions through the real parser."""
    return cli.train_options(cli.build_train_parser(environ or {}).parse_args(argv))
