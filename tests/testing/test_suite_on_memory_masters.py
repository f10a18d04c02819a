"""The suite's behavioural tests, written for real redis-servers, run unchanged on masters in
memory (hiredlock.testing.memory_masters): every lock kind (lock, reentrant lock, semaphore,
read-write lock, fair lock), batches, fencing, release notices, inspect's locked(), auto-renewal,
with the faults those tests make (kill, stop/resume, keys overwritten or deleted by hand), on
both APIs.

How: the tests are imported here, where `masters5` is five memory masters dressed as the suite's
servers (tests/support/memory_servers.py) and `engine` is "memory". The tests left out need what
only a server or a process has (DEBUG SLEEP, the fault proxy, CLIENT LIST, subprocesses given
URLs, the subscriber connections' internals), or name a master by its port in their messages.
"""

from __future__ import annotations

import os
import sys

import pytest
from apis import (  # noqa: F401  (sync and async APIs)
    make_redlock_fixture,
    pytest_generate_tests,
    sync_only,
)
from features_support import leakcheck_fixture  # noqa: F401  (the leakcheck fixture)
from memory_servers import memory_servers

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _folder in ("api", "kinds"):
    if os.path.join(_TESTS, _folder) not in sys.path:
        sys.path.insert(0, os.path.join(_TESTS, _folder))

from test_auto_renew import (  # noqa: E402  (collected here)
    test_majority_down_marks_lost,
    test_manual_extend_failure_marks_lost,
    test_minority_down_keeps_renewing,
    test_no_renewal_after_close,
    test_reacquired_lock_has_a_single_renewal_chain,
)
from test_batch import (  # noqa: E402, F401  (collected here)
    test_all_free_every_name_is_held,
    test_batch_locks_are_ordinary_locks,
    test_each_name_judged_on_its_own_quorum,
    test_names_taken_on_a_majority_get_none,
    test_one_set_per_name_per_master_and_the_releases_batched,
    test_release_many_with_a_lock_not_held_leaves_no_lock_in_limbo,
)
from test_fairlock import (  # noqa: E402, F401  (collected here)
    test_a_fenced_fair_lock_does_not_jump_the_queue,
    test_a_holder_that_never_releases_hands_over_when_its_key_expires,
    test_a_minority_win_gets_its_whole_place_back,
    test_a_waiter_that_gives_up_leaves_the_queue_at_once,
    test_fair_and_plain_locks_exclude_each_other,
    test_granted_in_the_order_asked,
    test_two_masters_down_in_order_three_down_unreachable,
    test_uncontended_is_one_round_trip_and_leaves_nothing,
)
from test_inspect import (  # noqa: E402, F401  (collected here)
    test_locked_needs_a_majority,
)
from test_lock_lifecycle import (  # noqa: E402, F401  (collected here)
    test_a_fence_counter_can_be_deleted_when_its_resource_is_retired,
    test_a_lock_lost_by_extend_and_one_expired_behave_the_same,
    test_an_expired_lock_can_be_acquired_again,
    test_blocking_timeout_bounds_acquire,
    test_deleting_the_fence_counter_of_a_held_lock_is_refused,
    test_renewal_gives_up_at_once_when_a_majority_says_the_key_is_gone,
)
from test_multilock import (  # noqa: E402, F401  (collected here)
    test_a_release_of_any_name_wakes_a_waiter,
    test_extend_and_auto_renew_cover_every_name,
    test_held_on_a_minority_of_masters_is_not_held,
    test_one_name_taken_takes_none_and_leaves_nothing,
    test_takes_every_name_and_releases_them_together,
    test_two_multilocks_in_opposite_orders_never_deadlock,
)
from test_quorum import (  # noqa: E402, F401  (collected here)
    test_blocking_timeout_returns_false,
    test_context_manager_lock,
    test_free_after_foreign_expires,
    test_many_names_independent,
    test_two_locks_same_name_exclusive,
)
from test_release_extend import (  # noqa: E402, F401  (collected here)
    test_close_warns_about_a_loss_it_finds,
    test_extend_after_expiry_is_lock_lost_and_does_not_recreate,
    test_extend_after_overwrite_is_lock_lost,
    test_extend_on_minority_overwrite_succeeds,
    test_extend_rearms_ttl,
    test_lock_object_reusable,
    test_not_held,
    test_release_after_expiry_and_retake_keeps_new_holder,
    test_release_after_expiry_is_lock_lost,
    test_release_after_overwrite_all_is_lock_lost,
    test_release_after_partial_overwrite,
    test_release_does_not_wait_for_expiry,
)
from test_rlock import (  # noqa: E402, F401  (collected here)
    test_reentrant_three_deep,
    test_release_by_non_owner_thread_refused,
)
from test_rwlock import (  # noqa: E402, F401  (collected here)
    test_each_reader_expires_on_its_own,
    test_failed_writer_opens_no_readers_pass,
    test_mixed_readers_and_writers,
    test_quorum_two_down_works_three_down_unreachable,
    test_readers_that_waited_go_before_the_next_writer,
    test_readers_together_writer_alone,
    test_refused_attempts_leave_nothing_and_marks_expire,
    test_waiting_writer_holds_back_new_readers,
)
from test_semaphore import (  # noqa: E402, F401  (collected here)
    test_a_late_release_does_not_free_the_next_holders_permit,
    test_auto_renew_keeps_a_permit_past_its_ttl,
    test_blocking_acquire_on_full_semaphore_times_out,
    test_permit_is_a_lock_extend_and_release_twice,
    test_three_permits_on_five_masters,
    test_three_threads_in_with_fourth_refused,
)
from test_semaphore_size import (  # noqa: E402, F401  (collected here)
    test_a_new_size_works_once_the_old_holders_released,
    test_inspect_shows_the_size_and_the_permits_held,
    test_the_size_record_lives_as_long_as_its_permits,
    test_two_sizes_never_give_more_holders_than_the_smaller,
)
from test_wake import (  # noqa: E402, F401  (collected here)
    test_a_dead_holders_lock_is_taken_when_its_keys_expire,
    test_a_master_down_the_others_still_notify,
    test_a_permit_release_wakes_a_semaphore_waiter,
    test_a_release_wakes_the_waiter,
    test_notices_published_by_hand_never_acquire,
)

# (written for the blocking API's watchdog, as in their own module)
for _test in (
    test_majority_down_marks_lost,
    test_manual_extend_failure_marks_lost,
    test_minority_down_keeps_renewing,
    test_no_renewal_after_close,
    test_reacquired_lock_has_a_single_renewal_chain,
):
    sync_only("the watchdog's renewals")(_test)


@pytest.fixture(params=["memory"])
def engine(request) -> str:
    return request.param


@pytest.fixture
def masters5():
    return memory_servers(5)
