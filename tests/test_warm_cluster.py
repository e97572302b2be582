"""`gpuhmm cluster`: a warm cluster that searches share through `--scheduler`, listening on
loopback unless TLS is set up, and refusing clients without a certificate when it is."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

import distributed
import pytest
from distributed.security import Security

from gpuhmm import cluster
from gpuhmm.cli import main

from helpers.data import DATA, GOLDEN, ROOT, TABLES, assert_tables_equal


def _wait_for(path, process, seconds=120):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "the cluster did not start"
        time.sleep(0.2)


def test_searches_share_a_warm_cluster_that_stops_cleanly(tmp_path):
    scheduler_file = tmp_path / "scheduler.json"
    command = [sys.executable, "-m", "gpuhmm", "cluster", "--backend", "cpu", "--cpu", "2"]
    process = subprocess.Popen(
        [*command, "--scheduler-file", str(scheduler_file)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        _wait_for(scheduler_file, process)
        for run in range(2):
            outputs = {kind: tmp_path / f"{run}.{kind}" for kind in TABLES}
            words = [word for kind, path in outputs.items() for word in (f"--{kind}", str(path))]
            arguments = ["search", "--scheduler", str(scheduler_file), "--backend", "cpu", *words]
            assert main([*arguments, str(DATA / "pfam-test.h3m.gz"), str(DATA / "proteins.faa")]) == 0
            for kind in TABLES:
                assert_tables_equal(outputs[kind], GOLDEN / f"proteins.defaults.{kind}")
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    assert "scheduler at tcp://127.0.0.1:" in stdout
    assert not scheduler_file.exists()


def test_listening_beyond_loopback_needs_tls(capsys):
    assert main(["cluster", "--backend", "cpu", "--host", "0.0.0.0"]) == 1
    assert "needs TLS" in capsys.readouterr().err


def _certificates(directory):
    """A CA and one certificate it signed (for 127.0.0.1), made with openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl to make test certificates")
    ca, ca_key, cert, key = (str(directory / name) for name in ("ca.pem", "ca.key", "node.pem", "node.key"))
    quiet = dict(check=True, capture_output=True)
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca,
                    "-days", "2", "-subj", "/CN=gpuhmm test CA"], **quiet)  # fmt: skip
    csr = str(directory / "node.csr")
    subprocess.run([openssl, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
                    "-subj", "/CN=127.0.0.1"], **quiet)  # fmt: skip
    subprocess.run([openssl, "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
                    "-out", cert, "-days", "2"], **quiet)  # fmt: skip
    return ca, cert, key


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """A directory of `_certificates`' files, and the CA's key."""
    directory = tmp_path_factory.mktemp("tls")
    _certificates(directory)
    return directory


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("--tls-ca-file", "missing.pem", "missing.pem: --tls-ca-file: cannot read (No such file or directory)"),
        ("--tls-cert", "junk.pem", "junk.pem: --tls-cert: no PEM certificate in it"),
        ("--tls-key", "folder", "folder: --tls-key: cannot read (Is a directory)"),
        ("--tls-key", "node.pem", "node.pem: --tls-key: not a PEM private key"),
        ("--tls-key", "ca.key", "ca.key: --tls-key: not the key of --tls-cert node.pem"),
        ("--port", "{port}", "--port {port}: cannot listen on 127.0.0.1 port {port} (Address already in use)"),
        ("--scheduler-file", "folder", "folder: --scheduler-file: is a directory"),
        ("--scheduler-file", "no/s.json", "no/s.json: --scheduler-file: directory {here}/no does not exist"),
    ],
)
def test_a_cluster_that_cannot_start_says_why_in_one_line_before_it_starts(
    tmp_path, monkeypatch, capsys, certificates, option, value, error
):
    """Refused before Dask starts a cluster, naming the file or port, and leaving nothing behind."""
    monkeypatch.setattr(cluster, "_local_cluster", lambda *args, **kwargs: pytest.fail("a cluster was started"))
    shutil.copytree(certificates, tmp_path, dirs_exist_ok=True)
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    tls = {"--tls-ca-file": "ca.pem", "--tls-cert": "node.pem", "--tls-key": "node.key"}
    before = sorted(tmp_path.iterdir())
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        names = {"port": listening.getsockname()[1], "here": os.path.realpath(tmp_path)}
        given = {**(tls if option.startswith("--tls") else {}), option: value.format(**names)}
        status = main(["cluster", "--backend", "cpu", *(word for pair in given.items() for word in pair)])
    assert (status, capsys.readouterr().err) == (1, f"gpuhmm cluster: error: {error.format(**names)}\n")
    assert sorted(tmp_path.iterdir()) == before


def test_a_tls_cluster_refuses_a_client_without_a_certificate(tmp_path):
    ca, cert, key = _certificates(tmp_path)
    settings = cluster.WarmCluster(
        backend="cpu", cpus=1, scheduler_file=str(tmp_path / "s.json"), tls_ca_file=ca, tls_cert=cert, tls_key=key
    )
    stopped = threading.Event()
    serving = threading.Thread(target=cluster.serve, args=(settings, stopped))
    serving.start()
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "s.json").exists():
            assert serving.is_alive() and time.monotonic() < deadline
            time.sleep(0.2)
        address = distributed.Client(
            scheduler_file=str(tmp_path / "s.json"),
            security=Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key, require_encryption=True),
            timeout="20s",
        )
        with address as client:
            assert client.scheduler.address.startswith("tls://127.0.0.1:")
            assert client.submit(sum, [1, 2]).result() == 3
            where = client.scheduler.address
        # A client that trusts the CA but shows no certificate of its own fails the handshake.
        host, port = urllib.parse.urlparse(where).hostname, urllib.parse.urlparse(where).port
        context = ssl.create_default_context(cafile=ca)
        context.check_hostname = False
        with socket.create_connection((host, port), timeout=10) as raw:
            with pytest.raises((ssl.SSLError, ConnectionError)):
                with context.wrap_socket(raw, server_hostname=host) as tls:
                    tls.sendall(b"\0" * 8)
                    assert tls.recv(1)  # TLS 1.3 reports the missing certificate here
        with pytest.raises((OSError, TimeoutError)):
            distributed.Client(where.replace("tls://", "tcp://"), timeout="3s")
    finally:
        stopped.set()
        serving.join(60)
    assert not serving.is_alive()
