"""What cli/quick.py knows of the commands it runs without click: every
parameter of each (name, option names, nargs, required, type, value when not
given).  Written by `python3 -m fstool.cli.quick` from the click commands;
do not edit."""

SPECS = {
    'path': (
        ('every', ('--all',), 1, False,
         ('flag',), False),
        ('replay_in_memory', ('--replay-in-memory',), 1, False,
         ('flag',), False),
        ('as_json', ('--json',), 1, False,
         ('flag',), False),
        ('image', (), 1, True,
         ('path', False, True, True, True, False, False), None),
        ('partition', ('--partition',), 1, False,
         ('str',), None),
        ('offset', ('--offset',), 1, False,
         ('intrange', 0, None), None),
        ('logdev', ('--logdev',), 1, False,
         ('str',), None),
        ('inos', (), -1, False,
         ('int',), ()),
    ),
    'mdrestore': (
        ('log_image', ('-l', '--log-image'), 1, False,
         ('path', False, True, False, True, False, False), None),
        ('as_json', ('--json',), 1, False,
         ('flag',), False),
        ('dump', (), 1, True,
         ('path', True, True, False, True, False, False), None),
        ('image', (), 1, True,
         ('path', False, True, False, True, False, False), None),
    ),
    'check': (
        ('jobs', ('-j', '--jobs'), 1, False,
         ('intrange', 1, None), 1),
        ('as_json', ('--json',), 1, False,
         ('flag',), False),
        ('fmt', ('--format',), 1, False,
         ('click',), None),
        ('image', (), 1, True,
         ('path', False, True, True, True, False, False), None),
        ('partition', ('--partition',), 1, False,
         ('str',), None),
        ('offset', ('--offset',), 1, False,
         ('intrange', 0, None), None),
        ('logdev', ('--logdev',), 1, False,
         ('str',), None),
    ),
}
