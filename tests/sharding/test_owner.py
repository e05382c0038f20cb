"""The owner-stage rule the planner and the runtime share: an argument belongs to the lowest stage that reads it."""

from planmap.sharding.owner import argument_owners


def test_an_argument_is_owned_by_the_lowest_stage_reading_it():
    op_stage = [1, 0, 2, -1]
    reads = [(0, 5), (1, 5), (2, 7), (3, 8), (0, 9), (2, 9)]
    assert argument_owners(op_stage, reads) == {5: 0, 7: 2, 9: 1}  # argument 8 is read by no stage's op
