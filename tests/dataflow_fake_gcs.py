"""A local stand-in for Google Cloud Storage, for launching
the pipeline on DataflowRunner from a machine that cannot reach Google.

Run with a Python that has `gcp-storage-emulator` (the fresh launcher venv of
tests/integration/test_pipeline_dataflow.py):

    python tests/dataflow_fake_gcs.py DATA_DIR PORT_FILE BUCKET...

It serves GCS's JSON API (gcp-storage-emulator, objects kept under DATA_DIR) with BUCKETs made.
A launcher then needs only environment variables (`launcher_env`): STORAGE_EMULATOR_HOST, which
google-cloud-storage honours, and application-default credentials holding an unexpired token,
so Beam's GCS client authenticates as it would with real credentials (without any, Beam retries
Google's credential lookup for half a minute and then goes anonymous).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def launcher_env(port: int, credentials_path: str) -> dict[str, str]:
    """Environment variables that point google-cloud-storage and google-auth at this server;
    writes the credentials file they name."""
    with open(credentials_path, "w") as f:
        json.dump(
            {
                "type": "authorized_user",
                "client_id": "fake-client",
                "client_secret": "fake-secret",
                "refresh_token": "fake-refresh",
                # a token valid for centuries: google-auth never refreshes it (it would ask
                # Google's token endpoint: the file's own token_uri is ignored)
                "token": "fake-token",
                "expiry": "2999-01-01T00:00:00Z",
            },
            f,
        )
    return {
        "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}",
        "GOOGLE_APPLICATION_CREDENTIALS": credentials_path,
        "GOOGLE_CLOUD_PROJECT": "my-project",
        # no probe of Google's metadata server (it would time out here)
        "NO_GCE_CHECK": "True",
    }


def main(data_dir: str, port_file: str, buckets: list[str]) -> None:
    from gcp_storage_emulator import server
    from gcp_storage_emulator.handlers.buckets import create_bucket

    with socket.socket() as s:  # a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gcs = server.create_server("127.0.0.1", port, in_memory=False, data_dir=data_dir)
    for bucket in buckets:
        create_bucket(bucket, gcs._storage)
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # before the server thread starts
    gcs.start()
    with open(port_file + ".tmp", "w") as f:
        f.write(str(port))
    os.replace(port_file + ".tmp", port_file)  # the caller waits for this file
    signal.sigwait(stop)
    gcs.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
