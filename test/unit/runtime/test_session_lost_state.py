"""What a session says is lost when its ranks are gone (`Session.lost_state`, in a launched session's RunError):
the steps since the last checkpoint saved or loaded, or since it started."""

import numpy as np
from session_programs import compiled, data


def test_the_lost_steps_are_counted_from_the_last_checkpoint_saved_or_loaded(tmp_path):
    x, w0 = data()
    with compiled().session(state={"w": w0}) as s:
        assert s.lost_state() == "no step had run and no checkpoint was saved: only the initial state is lost"
        s.step(x)
        s.step(x)
        assert s.lost_state().startswith("no checkpoint was saved: the state of steps 1-2 since the session "
                                         "started is lost")
        s.save(tmp_path / "a")
        assert s.lost_state().startswith(f"no step since the checkpoint saved at step 2 in {tmp_path / 'a'} is lost")
        s.step(x)
        assert s.lost_state() == (f"the state of step 3 since the checkpoint saved at step 2 in {tmp_path / 'a'} is "
                                  f"lost: load it in a new session (session.load('{tmp_path / 'a'}')) to go on from "
                                  "step 2")
    with compiled().session(state={"w": np.zeros_like(w0)}) as s:
        s.load(tmp_path / "a")
        for _ in range(3):
            s.step(x)
        assert s.lost_state().startswith(f"the state of steps 3-5 since the checkpoint loaded at step 2 in "
                                         f"{tmp_path / 'a'} is lost")
