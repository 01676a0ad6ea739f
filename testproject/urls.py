from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("pgjobs/", include("django_pgjobs.urls")),
    path("", include("testproject.demo.urls")),
]
