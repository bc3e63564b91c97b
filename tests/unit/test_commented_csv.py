"""resources.commented_csv: the reader of the CSV data files whose '#' lines carry their source."""

from simulator.resources import commented_csv


def test_comment_and_blank_lines_are_not_data(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("# Source: a paper, Table 2\n# assumption: one node\nid,value\n\n   \nb200,4.5\n# note between\nh200,4.8\n",
                    encoding="utf-8")
    assert commented_csv(path) == [{"id": "b200", "value": "4.5"}, {"id": "h200", "value": "4.8"}]


def test_a_hash_inside_a_row_is_data(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("id,label\nx,#1 run\n", encoding="utf-8")
    assert commented_csv(path) == [{"id": "x", "label": "#1 run"}]
