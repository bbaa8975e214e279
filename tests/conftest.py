import pytest

from fixtures import images


@pytest.fixture(scope="session")
def kernel_img():
    """The fixture tree as the kernel wrote it (small scale)."""
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS")
    return images.kernel_image("small")


@pytest.fixture(scope="session")
def scratch_xfs(tmp_path_factory):
    """A loop-mounted empty XFS filesystem to extract into (xattrs of every
    size need XFS on the receiving side too)."""
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS")
    import subprocess
    img = tmp_path_factory.mktemp("scratch") / "scratch.img"
    subprocess.run(["truncate", "-s", "2G", str(img)], check=True)
    subprocess.run(["mkfs.xfs", "-q", "-f", str(img)], check=True)
    with images.Mounted(img) as mnt:
        yield mnt


@pytest.fixture(scope="session")
def proto_img():
    """An image mkfs.xfs populated from a protofile (no root needed)."""
    if not images.xfsprogs_available():
        pytest.skip("xfsprogs (mkfs.xfs, xfs_db) not installed")
    return images.proto_image()


@pytest.fixture(scope="session")
def fragmented_img():
    """Kernel-written image with multi-level free-space and inode btrees."""
    if not images.loop_available():
        pytest.skip("needs root, xfsprogs and a kernel loop mount of XFS")
    return images.fragmented_image()


# -- disk: a passing test's tmp_path is removed when it ends ------------------
# (pytest keeps every test's directory until the session ends; the images
# the suite writes come to about 20 GB that way; a failing test's directory
# stays for a look)
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.fstool_passed = rep.passed


@pytest.fixture(autouse=True)
def _remove_tmp_path_of_passing_test(request):
    path = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames \
        else None
    yield
    if path is not None and getattr(request.node, "fstool_passed", False):
        import shutil
        shutil.rmtree(path, ignore_errors=True)
