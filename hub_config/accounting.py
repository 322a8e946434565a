"""GPU-hours accounting and budgets: a worked example (docs/accounting.md).

A department whose students each get 20 GPU-hours a week, whose course "ml101" shares 400 a
week on top of nothing else, and whose staff are admins (exempt). Load it from
``jupyterhub_config.py``, before or after ``install(c)`` (the hub is the same either way):

    load_subconfig("/etc/jupyterhub/accounting.py")

Reading the figures, as an admin (a token with the admin:users scope):

    # this week's GPU-hours by user, then by donor and GPU resource
    curl -H "Authorization: token $TOKEN" "$HUB/services/gpuburst/api/usage?by=user"
    curl -H "Authorization: token $TOKEN" "$HUB/services/gpuburst/api/usage?by=site,resource"
    # the semester's CSV for the department's report (one line per day, user, profile, site, resource, mode)
    curl -H "Authorization: token $TOKEN" -o fall.csv "$HUB/services/gpuburst/api/usage.csv?period=semester&date=Fall%202026"
    # five more hours for alice, this week only
    curl -H "Authorization: token $TOKEN" -d '{"user": "alice", "hours": 5}' "$HUB/services/gpuburst/api/budgets/grants"

What alice sees on the spawn form and under the launcher's GPU kernels on Wednesday, after
12.5 GPU-hours since Monday: "7.5 of 20 GPU-hours left this week, resets Monday 00:00 UTC."
When her hours run out while a GPU server or GPU kernel of hers runs, its Lab panel and status
bar warn "GPU-hour budget used up: this server stops in 10 min. Ask the hub's admins for more
hours.", and it is stopped 10 min later unless an admin grants her more hours first.

Right-sizing: alice's last five sessions on "2 GPUs" (80 GiB) peaked at 6 GiB; the spawn form
and her launcher add "Your last 5 GPU sessions peaked at 6 GiB of GPU memory: a MIG 1g.10gb
slice would do ("MIG slice (1g.10gb)")." The capacity page lists "2 GPUs" among the profiles
larger than their sessions need. The figures come from the servers' GPU activity reports, so
GPU culling must be configured (it may stay off), as below.
"""

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

# where the ledger lives: on the hub's persistent volume, beside jupyterhub.sqlite
c.GPUAccountingSettings.ledger_path = "/srv/jupyterhub/gpuburst-usage.sqlite"
c.GPUAccountingSettings.budget_period = "week"
c.GPUAccountingSettings.user_budgets = {"*": 20}
c.GPUAccountingSettings.group_budgets = {"ml101": 400}
# a session running when its budget runs out: warned, then stopped 10 min later (False: warn only)
c.GPUAccountingSettings.budget_stop = True
c.GPUAccountingSettings.budget_grace_seconds = 600
# reports by semester (and semester budgets, with budget_period = "semester")
c.GPUAccountingSettings.semesters = [
    {"name": "Fall 2026", "start": "2026-09-01", "end": "2027-01-31"},
    {"name": "Spring 2027", "start": "2027-02-01", "end": "2027-07-31"},
]
# /hub/metrics without usernames (the default); True adds a user label to the GPU-seconds counters
c.GPUAccountingSettings.metrics_usernames = False

# right-sizing reads what servers report of their GPUs: they report once GPUCullingSettings is
# configured; culling itself stays off here
c.GPUCullingSettings.enabled = False
# a whole A100's memory, for comparing whole GPUs with MIG slices (a slice says its own: 1g.10gb)
c.GPUBurstSpawner.resource_memory_gib = {"nvidia.com/gpu": 40}
# the sentence reads a student's last 5 measured GPU sessions and wants 20% above their peak
c.GPUAccountingSettings.right_sizing_sessions = 5
c.GPUAccountingSettings.right_sizing_headroom = 0.2
# the capacity page lists profiles whose sessions' median peak is at most half of what they hold
c.GPUAccountingSettings.right_sizing_small_share = 0.5
c.GPUAccountingSettings.right_sizing_days = 30
