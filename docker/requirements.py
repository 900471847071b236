"""Print the requirements in a pyproject.toml (and those of the extras named after it), one per line.

    python requirements.py PYPROJECT [EXTRA ...]

The images install these first, in a layer of their own (docker/jupyter.Dockerfile, docker/hub/Dockerfile):
an edit of labkit or the labs then rebuilds only the layers after it, in seconds.
"""

import sys
import tomllib

with open(sys.argv[1], "rb") as file:
    project = tomllib.load(file)["project"]
print("\n".join([*project["dependencies"], *(line for extra in sys.argv[2:]
                                             for line in project["optional-dependencies"][extra])]))
