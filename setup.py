"""Only what pyproject.toml cannot say: ship the top-level resources/ folder in the wheel.

In a source checkout resources/ sits beside app/; an installed wheel carries it as the
package `app._resources`, which app/core/resources.py looks for.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["app", "app.*"]) + ["app._resources"],
    package_dir={"app._resources": "resources"},
    package_data={"app._resources": ["*.json", "*.desktop", "*.xml", "icons/*"]},
    include_package_data=False,
)
