"""What the unit and the integration tests of the URL source share: its real inputs."""

from tests.conftest import REPO

URLS = REPO.parent / "shared" / "corpora" / "web" / "urls"
TXT = URLS / "RS_v2_2005-12.urls.txt"
GZ = URLS / "RS_v2_2005-12.urk.json-00.gz"
