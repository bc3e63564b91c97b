"""Published serving results (simulator/validation/data/published_serving.csv) reproduced within 20%."""

from simulator.validation.serving import PUBLISHED_TOLERANCE, published_serving_rows


def test_published_serving_rows_within_20_percent(capsys):
    rows = published_serving_rows()
    with capsys.disabled():
        print(f"\n{'id':26s}{'metric':24s}{'published':>12s}{'model':>12s}{'error':>8s}")
        for r in rows:
            print(f"{r['id']:26s}{r['metric']:24s}{r['published']:12.4g}{r['model']:12.4g}{r['error']:8.1%}")
    assert len(rows) == 4
    bad = [r for r in rows if abs(r["error"]) > PUBLISHED_TOLERANCE]
    assert not bad, bad
