# Golden remoting frames, built by hand field by field from the protocol reference (protocol.md
# §1.1-§1.4).
"""Golden frames written by hand from the reference tables, never produced by our encoder.

Each frame is the concatenation of its fields, one per line, with the field and value in the
comment. Lengths were counted by hand (and checked by counting characters). The ``EXPECTED_*``
dicts state what a correct decoder must return for each frame.
"""

# --- ROCKETMQ binary header: a Java SEND_MESSAGE_V2 request -------------------------------------
BINARY_SEND_V2_REQUEST = bytes.fromhex(
    "00000050"      # length = 4 + header 71 + body 5 = 80
    "01000047"      # header word: serialize type 1 (ROCKETMQ) << 24 | header length 71
    "0136"          # code 310 SEND_MESSAGE_V2 (short)
    "00"            # language 0 JAVA
    "0199"          # version 409 V4_9_8 (short)
    "00000007"      # opaque 7
    "00000000"      # flag 0: request, not oneway
    "00000000"      # remark length 0 (null)
    "00000032"      # ext block length 50 = 9 + 16 + 8 + 17
    "0001" "61" "00000002" "5047"                       # "a" (producerGroup) = "PG": 9 bytes
    "0001" "62" "00000009" "546f70696354657374"         # "b" (topic) = "TopicTest": 16 bytes
    "0001" "65" "00000001" "33"                         # "e" (queueId) = "3": 8 bytes
    "0001" "69" "0000000a" "54414753015461674102"      # "i" = "TAGS\x01TagA\x02": 17 bytes
    "48656c6c6f"    # body "Hello"
)
EXPECTED_BINARY_SEND_V2_REQUEST = dict(
    code=310, language=0, version=409, opaque=7, flag=0, remark=None,
    ext_fields={"a": "PG", "b": "TopicTest", "e": "3", "i": "TAGS\x01TagA\x02"},
    body=b"Hello", serialize_type=1,
)

# --- ROCKETMQ binary header: a response with a remark and no body -------------------------------
BINARY_RESPONSE = bytes.fromhex(
    "0000003c"      # length = 4 + header 56 = 60
    "01000038"      # header word: type 1 | header length 56 = 21 + 2 + 33
    "0000"          # code 0 SUCCESS
    "00"            # language JAVA
    "01df"          # version 479 V5_3_3
    "00000007"      # opaque 7 (echo of the request)
    "00000001"      # flag 1: response
    "00000002" "4f4b"                                   # remark length 2, "OK"
    "00000021"      # ext block length 33 = 14 + 19
    "0007" "71756575654964" "00000001" "33"             # "queueId" = "3": 14 bytes
    "000b" "71756575654f6666736574" "00000002" "3137"   # "queueOffset" = "17": 19 bytes
)
EXPECTED_BINARY_RESPONSE = dict(
    code=0, language=0, version=479, opaque=7, flag=1, remark="OK",
    ext_fields={"queueId": "3", "queueOffset": "17"}, body=None, serialize_type=1,
)

# --- ROCKETMQ binary header with a zero-length ext value (Java reads it as null) ---------------
BINARY_EMPTY_VALUE = bytes.fromhex(
    "00000020"      # length = 4 + header 28 = 32
    "0100001c"      # header word: type 1 | header length 28 = 21 + 7
    "0022"          # code 34 HEART_BEAT
    "09"            # language 9 GO
    "013d"          # version 317 V4_5_2
    "00000009"      # opaque 9
    "00000000"      # flag 0
    "00000000"      # remark length 0
    "00000007"      # ext block length 7 = 2 + 1 + 4
    "0001" "6b" "00000000"                              # "k" with a zero-length value
)
EXPECTED_BINARY_EMPTY_VALUE = dict(
    code=34, language=9, version=317, opaque=9, flag=0, remark=None, ext_fields={},
    body=None, serialize_type=1,
)

# --- JSON header: a Java 5.x send response, as in protocol.md §1.3 example -----------------
JSON_JAVA_SEND_RESPONSE_HEADER = (
    b'{"code":0,"extFields":{"msgId":"0A00000100002A9F0000000000000011","queueId":"3",'
    b'"queueOffset":"17","MSG_REGION":"DefaultRegion","TRACE_ON":"true"},"flag":1,'
    b'"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"JSON","version":479}'
)
JSON_JAVA_SEND_RESPONSE = (
    bytes.fromhex(
        "000000ed"  # length = 4 + header 233 = 237
        "000000e9"  # header word: type 0 (JSON) | header length 233
    )
    + JSON_JAVA_SEND_RESPONSE_HEADER  # 233 bytes, no body
)
EXPECTED_JSON_JAVA_SEND_RESPONSE = dict(
    code=0, language=0, version=479, opaque=42, flag=1, remark=None,
    ext_fields={"msgId": "0A00000100002A9F0000000000000011", "queueId": "3",
                "queueOffset": "17", "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"},
    body=None, serialize_type=0,
)

# --- JSON header: Go client style (remark "" and extFields {} always present) ------------------
JSON_GO_HEARTBEAT = (
    bytes.fromhex(
        "00000076"  # length = 4 + header 88 + body 26 = 118
        "00000058"  # header word: type 0 | header length 88
    )
    + b'{"code":34,"language":"GO","version":317,"opaque":5,"flag":0,"remark":"","extFields":{}}'
    + b'{"clientID":"127.0.0.1@1"}'  # body: 26 bytes
)
EXPECTED_JSON_GO_HEARTBEAT = dict(
    code=34, language=9, version=317, opaque=5, flag=0, remark=None, ext_fields={},
    body=b'{"clientID":"127.0.0.1@1"}', serialize_type=0,
)

# --- JSON header: C++ client style (numbers and booleans as ext values, trailing newline) ------
JSON_CPP_SEND_V2 = (
    bytes.fromhex(
        "000000ea"  # length = 4 + header 228 + body 2 = 234
        "000000e4"  # header word written without a type byte: 0 | header length 228
    )
    + b'{"code":310,"extFields":{"AccessKey":"","OnsChannel":"","Signature":"","a":"PG",'
    + b'"b":"TopicTest","d":4,"e":1,"f":0,"h":0,"m":false},"flag":0,"language":"CPP",'
    + b'"opaque":3,"remark":"","serializeTypeCurrentRPC":"JSON","version":333}\n'
    + b"Hi"  # body: 2 bytes
)
EXPECTED_JSON_CPP_SEND_V2 = dict(
    code=310, language=1, version=333, opaque=3, flag=0, remark=None,
    ext_fields={"AccessKey": "", "OnsChannel": "", "Signature": "", "a": "PG", "b": "TopicTest",
                "d": "4", "e": "1", "f": "0", "h": "0", "m": "false"},
    body=b"Hi", serialize_type=0,
)

# Every golden frame with its expectation, for table-driven tests.
ALL = {
    "binary_send_v2_request": (BINARY_SEND_V2_REQUEST, EXPECTED_BINARY_SEND_V2_REQUEST),
    "binary_response": (BINARY_RESPONSE, EXPECTED_BINARY_RESPONSE),
    "binary_empty_value": (BINARY_EMPTY_VALUE, EXPECTED_BINARY_EMPTY_VALUE),
    "json_java_send_response": (JSON_JAVA_SEND_RESPONSE, EXPECTED_JSON_JAVA_SEND_RESPONSE),
    "json_go_heartbeat": (JSON_GO_HEARTBEAT, EXPECTED_JSON_GO_HEARTBEAT),
    "json_cpp_send_v2": (JSON_CPP_SEND_V2, EXPECTED_JSON_CPP_SEND_V2),
}
