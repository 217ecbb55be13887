"""Writes the inputs of benches/protect_instructions.sh to DIR (fixed seed; idempotent)."""
import json
import os
import random
import sys

out, corpora = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
rng = random.Random(36)


def write(name, docs):
    path = os.path.join(out, name)
    text = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs)
    if os.path.exists(path) and open(path, encoding="utf-8").read() == text:
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


lines = []
with open(os.path.join(corpora, "gitleaks_labeled.jsonl"), encoding="utf-8") as f:
    for row in f:
        r = json.loads(row)
        text = r.get("text") or r.get("line") or r.get("sample") or ""
        if text:
            lines.append(text)
with open(os.path.join(corpora, "credsweeper_samples.jsonl"), encoding="utf-8") as f:
    for row in f:
        text = json.loads(row).get("text") or ""
        if text:
            lines.append(text)
write(
    "corpus_mix",
    [{"tool": "shell", "lines": lines[i : i + 8]} for i in range(0, len(lines), 8)],
)

STREETS = ["Main St", "Oak Ave", "Pine Rd", "Market St", "Elm Ct", "Harbor Blvd"]
CITIES = [("San Francisco", "94107"), ("Austin", "78701"), ("Boston", "02108"), ("Denver", "80202")]
ITEMS = ["widget", "gadget", "cable", "adapter", "charger", "sleeve"]


def order(i, secret):
    city, zip_code = rng.choice(CITIES)
    doc = {
        "order_id": f"ord_{i:06d}",
        "customer": {
            "login": f"user{rng.randrange(10**5)}",
            "name": f"Customer {i}",
            "address": {
                "street": f"{rng.randrange(1, 999)} {rng.choice(STREETS)}",
                "city": city,
                "zip": zip_code,
            },
        },
        "items": [
            {"sku": f"{rng.choice(ITEMS)}-{rng.randrange(100)}", "qty": rng.randrange(1, 5),
             "price_cents": rng.randrange(199, 9999)}
            for _ in range(rng.randrange(1, 4))
        ],
        "note": rng.choice(["leave at door", "gift wrap", "", "call on arrival"]),
    }
    if secret:
        kind = i % 5
        doc["note"] = [
            f"contact buyer{i}@example.org",
            f"call +1 415 555 {1000 + i % 9000:04d}",
            "key sk-proj-" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(48)),
            "paid with 4111 1111 1111 1111",
            "ghp_" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(36)),
        ][kind]
    return doc


write("orders", [order(i, False) for i in range(6000)])
rng = random.Random(36)
write("orders_secret", [order(i, i % 4 == 0) for i in range(6000)])

# Tool calls whose arguments are a JSON document in a string, about 512 bytes, a secret in
# each: every document is surveyed and read on its own, as protect's 1 KiB bench has it (the
# inputs above are one text each to `redact`, which hides the cost paid per document).
rng = random.Random(36)
calls = []
for i in range(2000):
    records, size = [], 0
    while size < 512:
        n = i * 3 + len(records)
        record = {"order_id": f"ORD-{n * 7919 % 10**8:08d}", "amount_cents": n * 31 % 500000,
                  "note": " ".join(rng.choice(ITEMS) for _ in range(6)),
                  "updated": "2026-11-30T05:17:14.133Z", "trace": f"{rng.getrandbits(128):032x}"}
        if not records:
            record["contact"] = order(i, True)["note"]
        records.append(record)
        size += len(json.dumps(record)) + 1
    calls.append({"tool": "search_orders", "arguments": json.dumps({"items": records})})
# One JSON array: `redact` reads its file as one text, and JSON lines would be read as text.
write("tool_calls", [calls])

MESSAGES = [
    "Привет! Я проверил журнал сборки, ошибка в модуле оплаты, исправлю сегодня вечером.",
    "构建日志显示支付模块出错，我今晚会修复它，然后重新部署到测试环境。",
    "ビルドログを確認しました。決済モジュールでエラーが出ているので、今夜修正します。",
    "Ich habe das Build-Protokoll geprüft: Der Fehler liegt im Zahlungsmodul, ich behebe ihn heute.",
    "J'ai vérifié le journal de compilation : l'erreur vient du module de paiement.",
    "Revisé el registro de compilación; el error está en el módulo de pagos, lo arreglo hoy.",
    "빌드 로그를 확인했습니다. 결제 모듈에서 오류가 발생해서 오늘 밤에 고치겠습니다.",
    "ตรวจสอบบันทึกการสร้างแล้ว ข้อผิดพลาดอยู่ที่โมดูลการชำระเงิน จะแก้ไขคืนนี้",
    "Kiểm tra nhật ký xây dựng: lỗi nằm ở mô-đun thanh toán, tôi sẽ sửa tối nay.",
]
write(
    "languages",
    [{"role": "assistant", "turn": i, "content": rng.choice(MESSAGES)} for i in range(4000)],
)
