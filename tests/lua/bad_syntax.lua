return st.job {
  name = "syntax"
  data = {},
}
