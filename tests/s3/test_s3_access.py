"""A real access-denied prefix: moto's IAM policy evaluation is switched on for this test only
(``moto.settings.INITIAL_NO_AUTH_ACTION_COUNT = 0``) and the kit signs as an IAM user whose
policy denies s3:GetObject on ``secret/*``. HeadObject there answers 403 over HTTP."""

from __future__ import annotations

import json
import os

import boto3
import pytest
from s3_testlib import run, write_local

from ckptrescue.engine.action import from_library
from ckptrescue.engine.executor import record


@pytest.fixture
def denied_prefix(s3server, writer, bucket, tmp_path):
    from moto import settings

    writer.put_object(Bucket=bucket, Key="run/open/a.bin", Body=b"a" * 100,
                      ChecksumAlgorithm="SHA256")
    writer.put_object(Bucket=bucket, Key="run/secret/b.bin", Body=b"b" * 100,
                      ChecksumAlgorithm="SHA256")
    local = tmp_path / "local"
    write_local(local, "open/a.bin", b"a" * 100)
    write_local(local, "secret/b.bin", b"b" * 100)
    iam = boto3.client("iam", endpoint_url=s3server.endpoint_url, region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    user = f"responder-{bucket}"
    iam.create_user(UserName=user)
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
        {"Effect": "Deny", "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{bucket}/run/secret/*"}]}
    iam.put_user_policy(UserName=user, PolicyName="deny-secret", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    old = settings.INITIAL_NO_AUTH_ACTION_COUNT
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    try:
        yield {"bucket": bucket, "local": local, "key_id": key["AccessKeyId"],
               "secret": key["SecretAccessKey"]}
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = old


def test_access_denied_prefix_library_keeps_partial_results(denied_prefix, options, monkeypatch,
                                                             case):
    from ckptrescue.stores.s3.api import VerifyFailed, verify_prefix

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", denied_prefix["key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", denied_prefix["secret"])
    with pytest.raises(VerifyFailed) as info:
        verify_prefix(f"s3://{denied_prefix['bucket']}/run/", denied_prefix["local"],
                      client_options=options)
    record(case, from_library(info.value.partial))  # what a failed step records
    assert int(info.value.exit_code) == 4
    assert "access denied" in info.value.message
    objs = {o["key"]: o for o in info.value.partial.to_json()["objects"]}
    assert objs["open/a.bin"]["status"] == "match"
    assert objs["secret/b.bin"]["status"] == "unreadable"
    assert "access denied" in objs["secret/b.bin"]["detail"]["message"]
    assert "S3005" in [f.code for f in case.findings()]  # partial results are in the case too


def test_access_denied_prefix_cli_one_line_exit_4(denied_prefix, s3server):
    result = run(["s3", "verify", f"s3://{denied_prefix['bucket']}/run/",
                  str(denied_prefix["local"]), "--json", "--endpoint-url", s3server.endpoint_url],
                 env_extra={"AWS_ACCESS_KEY_ID": denied_prefix["key_id"],
                            "AWS_SECRET_ACCESS_KEY": denied_prefix["secret"]})
    assert result.returncode == 4
    errors = [line for line in result.stderr.splitlines() if line.startswith("ckptrescue:")]
    assert len(errors) == 1, result.stderr
    first = errors[0]
    assert first.startswith("ckptrescue: error:") and "access denied" in first
    assert "Traceback" not in result.stderr
    partial = json.loads(result.stdout)
    assert {o["key"]: o["status"] for o in partial["objects"]} == {
        "open/a.bin": "match", "secret/b.bin": "unreadable"}
    assert os.environ.get("AWS_ACCESS_KEY_ID") != denied_prefix["key_id"]
